// Byte-level BPE as tiktoken defines it: a piece (one pre-tokenizer match, as bytes) starts
// as single bytes; the adjacent pair whose concatenation has the lowest rank is merged,
// the leftmost one on ties, until no adjacent pair is a token. Every single byte is a
// token, so every piece encodes.
//
// Two implementations give identical ids: a linear rescan (tiktoken's own, fastest on the
// short pieces of ordinary text) and a heap over pair ranks with a linked list of parts
// (O(n log n), for long pieces such as runs of one character or base64 blobs).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::data::bpe {

// Bytes -> rank, open addressing over one arena of token bytes. Read-only after build,
// so any number of threads may look up at once.
class RankTable {
 public:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  // Adds a token; false if the bytes were already present (a malformed rank file).
  bool insert(std::string_view bytes, uint32_t rank);
  uint32_t find(std::string_view bytes) const { return find(bytes, hash_bytes(bytes)); }
  uint32_t find(std::string_view bytes, uint64_t hash) const;
  size_t size() const { return size_; }
  // Unique per table for the life of the process (caches key on it, not on the address,
  // which a later table may reuse).
  uint64_t id() const { return id_; }
  static uint64_t hash_bytes(std::string_view bytes);

 private:
  // Probe slots are 8 bytes (a 32-bit hash tag and the rank) so the 2^19 slots of o200k
  // fit in 4 MiB; the bytes of rank r are arena_[offset_[r], offset_[r] + length_[r]).
  struct Slot {
    uint32_t tag = 0;
    uint32_t rank = kNone;  // kNone: empty slot
  };
  void grow();
  bool same(uint32_t rank, std::string_view bytes) const;
  std::string arena_;
  std::vector<uint32_t> offset_, length_;  // by rank
  std::vector<Slot> slots_;
  size_t size_ = 0;
  uint64_t id_ = next_id();
  static uint64_t next_id();
};

// Appends the ranks (= token ids) of `piece` to `out`. Pieces that need merging are kept in
// a small per-thread cache (frequent words recur), so each is merged once per thread.
void encode_piece(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out);

// The two merge strategies, exposed so tests can check that they agree.
void merge_linear(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out);
void merge_heap(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out);

// Pieces longer than this use merge_heap (the linear rescan is quadratic).
inline constexpr size_t kHeapMergeMinBytes = 128;

}  // namespace kiln::data::bpe
