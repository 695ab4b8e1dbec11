#include "kiln/data/sources/decompress.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::data {
namespace {

// Compressed bytes read from the file at a time: large enough that a read is one system
// call per MiB, small next to the documents a reader holds.
constexpr size_t kInputBuffer = size_t{1} << 20;

// The file itself, through read(2) (no stdio buffer: callers read big chunks anyway).
class RawFile final : public ByteStream {
 public:
  RawFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~RawFile() override { ::close(fd_); }

  Result<size_t> read(char* buffer, size_t capacity) override {
    size_t got = 0;
    while (got < capacity) {
      ssize_t n = ::read(fd_, buffer + got, capacity - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("{}: read failed at byte {}: {}", path_, offset_ + got, std::strerror(errno));
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    offset_ += got;
    return got;
  }
  const std::string& path() const { return path_; }
  int64_t offset() const { return offset_; }  // bytes read so far

 private:
  std::string path_;
  int fd_;
  int64_t offset_ = 0;
};

// gzip members, one after another until the file ends (RFC 1952: a gzip file is a series of
// members; `cat a.gz b.gz` is valid and decompresses to both).
class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(std::unique_ptr<RawFile> file) : file_(std::move(file)), in_(kInputBuffer) {}
  ~GzipStream() override {
    if (initialized_) inflateEnd(&zs_);
  }

  Status init() {
    // 15 + 16: a 32 KiB window and a gzip header and trailer (not zlib's, not raw deflate).
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) return internal_error("{}: zlib inflateInit2 failed", file_->path());
    initialized_ = true;
    return ok_status();
  }

  Result<size_t> read(char* buffer, size_t capacity) override {
    if (done_ || capacity == 0) return size_t{0};
    capacity = std::min<size_t>(capacity, UINT_MAX);
    zs_.next_out = reinterpret_cast<Bytef*>(buffer);
    zs_.avail_out = static_cast<uInt>(capacity);
    while (zs_.avail_out == capacity) {  // until something came out
      if (zs_.avail_in == 0 && !eof_) {
        auto n = file_->read(in_.data(), in_.size());
        if (!n.ok()) return n.status();
        eof_ = *n == 0;
        zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
        zs_.avail_in = static_cast<uInt>(*n);
      }
      if (zs_.avail_in == 0 && eof_) {
        if (in_member_ || members_ == 0) {
          return data_loss("{}: truncated gzip file: it ends at byte {} inside {}", file_->path(), file_->offset(),
                           members_ == 0 && !in_member_ ? "its first member (the file is empty)"
                                                        : fmt::format("member {}", members_ + 1));
        }
        done_ = true;
        break;
      }
      in_member_ = true;
      int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        // One member done; whatever follows in the file is the next member.
        ++members_;
        in_member_ = false;
        inflateReset(&zs_);
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) {
        return data_loss("{}: corrupt gzip data in member {} at byte {}: {}", file_->path(), members_ + 1,
                         file_->offset() - zs_.avail_in, zs_.msg ? zs_.msg : "invalid deflate stream");
      } else if (rc == Z_MEM_ERROR) {
        return internal_error("{}: zlib ran out of memory", file_->path());
      }
      // Z_OK, or Z_BUF_ERROR (no progress without more input): go round.
    }
    return capacity - zs_.avail_out;
  }

 private:
  std::unique_ptr<RawFile> file_;
  std::vector<char> in_;
  z_stream zs_{};
  bool initialized_ = false;
  bool eof_ = false, done_ = false;
  bool in_member_ = false;  // inflate has been given bytes of a member it has not finished
  int64_t members_ = 0;     // members finished
};

// zstd frames, one after another until the file ends (what `zstd -c a b` writes).
class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(std::unique_ptr<RawFile> file)
      : file_(std::move(file)), in_(kInputBuffer), dctx_(ZSTD_createDCtx()) {}
  ~ZstdStream() override { ZSTD_freeDCtx(dctx_); }

  Status init() {
    if (!dctx_) return internal_error("{}: ZSTD_createDCtx failed", file_->path());
    return ok_status();
  }

  Result<size_t> read(char* buffer, size_t capacity) override {
    if (done_ || capacity == 0) return size_t{0};
    ZSTD_outBuffer out{buffer, capacity, 0};
    while (out.pos == 0) {
      if (input_.pos == input_.size && !eof_) {
        auto n = file_->read(in_.data(), in_.size());
        if (!n.ok()) return n.status();
        eof_ = *n == 0;
        input_ = ZSTD_inBuffer{in_.data(), *n, 0};
      }
      bool input_done = input_.pos == input_.size && eof_;
      if (input_done && frame_open_ == 0) {
        if (frames_ == 0) {
          return data_loss("{}: truncated zstd file: it ends at byte {} before its first frame (the file is empty)",
                           file_->path(), file_->offset());
        }
        done_ = true;
        break;
      }
      // With no input left this still flushes what the decoder holds from an earlier call
      // that filled the caller's buffer.
      size_t rc = ZSTD_decompressStream(dctx_, &out, &input_);
      if (ZSTD_isError(rc)) {
        return data_loss("{}: corrupt zstd data in frame {} at byte {}: {}", file_->path(), frames_ + 1,
                         file_->offset() - static_cast<int64_t>(input_.size - input_.pos), ZSTD_getErrorName(rc));
      }
      frame_open_ = rc;  // 0: a frame is complete and fully flushed
      if (rc == 0) ++frames_;
      if (input_done && out.pos == 0 && frame_open_ != 0) {
        return data_loss("{}: truncated zstd file: it ends at byte {} inside frame {}", file_->path(),
                         file_->offset(), frames_ + 1);
      }
    }
    return out.pos;
  }

 private:
  std::unique_ptr<RawFile> file_;
  std::vector<char> in_;
  ZSTD_DCtx* dctx_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool eof_ = false, done_ = false;
  size_t frame_open_ = 0;  // ZSTD_decompressStream's last answer: non-zero inside a frame
  int64_t frames_ = 0;     // frames finished
};

}  // namespace

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kNone: return "none";
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
  }
  return "?";
}

Result<std::unique_ptr<ByteStream>> open_byte_stream(const std::string& path, Compression compression) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("{}: no such file", path);
    return io_error("{}: cannot open: {}", path, std::strerror(errno));
  }
  auto file = std::make_unique<RawFile>(path, fd);
  switch (compression) {
    case Compression::kNone: return std::unique_ptr<ByteStream>(std::move(file));
    case Compression::kGzip: {
      auto s = std::make_unique<GzipStream>(std::move(file));
      KILN_RETURN_IF_ERROR(s->init());
      return std::unique_ptr<ByteStream>(std::move(s));
    }
    case Compression::kZstd: {
      auto s = std::make_unique<ZstdStream>(std::move(file));
      KILN_RETURN_IF_ERROR(s->init());
      return std::unique_ptr<ByteStream>(std::move(s));
    }
  }
  return internal_error("{}: unknown compression", path);
}

}  // namespace kiln::data
