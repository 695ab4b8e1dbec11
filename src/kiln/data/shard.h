// Token shards: documents of token ids in one binary file, read through mmap.
//
// Layout (little-endian; docs/data.md is the reference):
//   header, 64 bytes:
//     0  char[8]  magic "KILNTOK\0"
//     8  u32      version (1)
//    12  u32      token width in bytes: 2 (uint16) or 4 (uint32)
//    16  u64      vocab_size: every token id is < vocab_size
//    24  u64      num_documents
//    32  u64      num_tokens
//    40  u32      bos_id (0xFFFFFFFF: none)
//    44  u32      eos_id (0xFFFFFFFF: none)
//    48  u8[16]   reserved, zero
//   offsets  u64[num_documents + 1]: document i is tokens[offsets[i], offsets[i+1]);
//            offsets[0] = 0, offsets[num_documents] = num_tokens, non-decreasing
//   tokens   num_tokens × (uint16 | uint32)
// The file is exactly that long. Documents hold the tokenizer's ids without BOS/EOS: the
// input pipeline adds them (add_bos, add_eos) from the ids in the header.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::data {

inline constexpr char kShardMagic[8] = {'K', 'I', 'L', 'N', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kNoToken = 0xFFFFFFFFu;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardInfo {
  uint64_t vocab_size = 0;
  uint32_t bos_id = kNoToken, eos_id = kNoToken;
};

// Collects documents in memory and writes one shard (to PATH.tmp, then renamed).
class ShardWriter {
 public:
  explicit ShardWriter(ShardInfo info) : info_(info) {}
  // Fails (invalid_argument) on a token id >= vocab_size.
  Status add_document(std::span<const int32_t> tokens);
  int64_t num_documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // uint16 tokens when vocab_size <= 65536, uint32 otherwise.
  Status write(const std::string& path) const;
  void clear();

 private:
  ShardInfo info_;
  std::vector<uint64_t> offsets_{0};
  std::vector<uint32_t> tokens_;
};

// A read-only, memory-mapped shard. open() validates the whole file: header, length,
// offsets and every token id (< vocab_size); each failure is one line naming the file.
class Shard {
 public:
  static Result<std::unique_ptr<Shard>> open(const std::string& path);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  const std::string& path() const { return path_; }
  const ShardInfo& info() const { return info_; }
  int64_t num_documents() const { return num_documents_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t document_size(int64_t i) const { return static_cast<int64_t>(offsets_[i + 1] - offsets_[i]); }
  // Token j of document i.
  uint32_t token(int64_t i, int64_t j) const {
    uint64_t k = offsets_[i] + static_cast<uint64_t>(j);
    return width_ == 2 ? reinterpret_cast<const uint16_t*>(tokens_)[k] : reinterpret_cast<const uint32_t*>(tokens_)[k];
  }
  std::vector<int32_t> document(int64_t i) const;
  uint32_t max_token() const { return max_token_; }  // 0 for an empty shard

 private:
  Shard() = default;
  std::string path_;
  ShardInfo info_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint64_t* offsets_ = nullptr;
  const uint8_t* tokens_ = nullptr;
  uint32_t width_ = 4;
  int64_t num_documents_ = 0, num_tokens_ = 0;
  uint32_t max_token_ = 0;
};

}  // namespace kiln::data
