#include "kiln/data/shard.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln::data {

namespace {

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace

Status ShardWriter::add_document(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    if (t < 0 || static_cast<uint64_t>(t) >= info_.vocab_size) {
      return invalid_argument("token id {} is outside the vocabulary [0, {})", t, info_.vocab_size);
    }
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  offsets_.push_back(tokens_.size());
  return ok_status();
}

void ShardWriter::clear() {
  offsets_.assign(1, 0);
  tokens_.clear();
}

Status ShardWriter::write(const std::string& path) const {
  const uint32_t width = info_.vocab_size <= 65536 ? 2 : 4;
  std::string out;
  out.reserve(kShardHeaderBytes + 8 * offsets_.size() + width * tokens_.size());
  out.append(kShardMagic, sizeof(kShardMagic));
  put<uint32_t>(out, kShardVersion);
  put<uint32_t>(out, width);
  put<uint64_t>(out, info_.vocab_size);
  put<uint64_t>(out, offsets_.size() - 1);
  put<uint64_t>(out, tokens_.size());
  put<uint32_t>(out, info_.bos_id);
  put<uint32_t>(out, info_.eos_id);
  out.append(16, '\0');
  for (uint64_t o : offsets_) put<uint64_t>(out, o);
  for (uint32_t t : tokens_) {
    if (width == 2) {
      put<uint16_t>(out, static_cast<uint16_t>(t));
    } else {
      put<uint32_t>(out, t);
    }
  }
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error("{}: cannot create: {}", tmp, std::strerror(errno));
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return io_error("{}: write failed: {}", tmp, std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return io_error("{}: cannot rename to {}: {}", tmp, path, ec.message());
  return ok_status();
}

Result<std::unique_ptr<Shard>> Shard::open(const std::string& path) {
  std::unique_ptr<Shard> s(new Shard());
  s->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("{}: token shard not found", path);
    return io_error("{}: cannot open token shard: {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("{}: not a regular file", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    return data_loss("{}: truncated token shard: {} bytes, shorter than the {}-byte header", path, size,
                     kShardHeaderBytes);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return io_error("{}: mmap failed: {}", path, std::strerror(errno));
  s->map_ = map;
  s->map_size_ = size;
  const uint8_t* p = static_cast<const uint8_t*>(map);
  if (std::memcmp(p, kShardMagic, sizeof(kShardMagic)) != 0) {
    return data_loss("{}: not a Kiln token shard (wrong magic; expected \"KILNTOK\")", path);
  }
  uint32_t version = get<uint32_t>(p + 8);
  if (version != kShardVersion) {
    return data_loss("{}: token shard version {} is not supported (this build reads version {})", path, version,
                     kShardVersion);
  }
  s->width_ = get<uint32_t>(p + 12);
  if (s->width_ != 2 && s->width_ != 4) {
    return data_loss("{}: token width {} bytes is not 2 (uint16) or 4 (uint32)", path, s->width_);
  }
  s->info_.vocab_size = get<uint64_t>(p + 16);
  uint64_t docs = get<uint64_t>(p + 24), tokens = get<uint64_t>(p + 32);
  s->info_.bos_id = get<uint32_t>(p + 40);
  s->info_.eos_id = get<uint32_t>(p + 44);
  // Sizes from the header must describe exactly this file (checked without overflow).
  const uint64_t limit = size;
  if (docs > limit / 8 || tokens > limit / s->width_ ||
      kShardHeaderBytes + 8 * (docs + 1) + s->width_ * tokens != size) {
    return data_loss("{}: truncated or oversized token shard: the header says {} documents and {} tokens ({} bytes), "
                     "the file has {} bytes",
                     path, docs, tokens,
                     docs > limit / 8 || tokens > limit / s->width_
                         ? std::string("more than the file")
                         : std::to_string(kShardHeaderBytes + 8 * (docs + 1) + s->width_ * tokens),
                     size);
  }
  s->num_documents_ = static_cast<int64_t>(docs);
  s->num_tokens_ = static_cast<int64_t>(tokens);
  s->offsets_ = reinterpret_cast<const uint64_t*>(p + kShardHeaderBytes);
  s->tokens_ = p + kShardHeaderBytes + 8 * (docs + 1);
  if (s->offsets_[0] != 0 || s->offsets_[docs] != tokens) {
    return data_loss("{}: document offsets do not span the tokens (first {}, last {}, tokens {})", path,
                     s->offsets_[0], s->offsets_[docs], tokens);
  }
  for (uint64_t i = 0; i < docs; ++i) {
    if (s->offsets_[i + 1] < s->offsets_[i]) {
      return data_loss("{}: document offsets decrease at document {}", path, i);
    }
  }
  for (uint64_t k = 0; k < tokens; ++k) {
    uint32_t t = s->width_ == 2 ? reinterpret_cast<const uint16_t*>(s->tokens_)[k]
                                : reinterpret_cast<const uint32_t*>(s->tokens_)[k];
    if (t >= s->info_.vocab_size) {
      return data_loss("{}: token {} has id {}, not below the shard's vocab_size {}", path, k, t,
                       s->info_.vocab_size);
    }
    s->max_token_ = std::max(s->max_token_, t);
  }
  return s;
}

Shard::~Shard() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

std::vector<int32_t> Shard::document(int64_t i) const {
  std::vector<int32_t> out(static_cast<size_t>(document_size(i)));
  for (int64_t j = 0; j < document_size(i); ++j) out[j] = static_cast<int32_t>(token(i, j));
  return out;
}

}  // namespace kiln::data
