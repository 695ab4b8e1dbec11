#include "kiln/data/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <queue>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"

namespace kiln::data::bpe {

uint64_t RankTable::hash_bytes(std::string_view bytes) {
  // Eight bytes at a time through SplitMix64: tokens are short (mostly one load), so this
  // beats a byte-at-a-time FNV by several times on the hot lookup path.
  uint64_t h = bytes.size() * 0x9e3779b97f4a7c15ull;
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix64(h ^ w);
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  if (n > 0) std::memcpy(&w, p, n);  // p may be null for empty bytes
  return mix64(h ^ w ^ (uint64_t{n} << 59));
}

uint64_t RankTable::next_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void RankTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.rank == kNone) continue;
    // The tag is the hash's high half, the start slot its low bits: recompute from bytes.
    uint64_t h = hash_bytes(std::string_view(arena_.data() + offset_[s.rank], length_[s.rank]));
    size_t i = h & mask;
    while (slots_[i].rank != kNone) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

bool RankTable::same(uint32_t rank, std::string_view bytes) const {
  return length_[rank] == bytes.size() && std::memcmp(arena_.data() + offset_[rank], bytes.data(), bytes.size()) == 0;
}

bool RankTable::insert(std::string_view bytes, uint32_t rank) {
  KILN_CHECK(rank != kNone);
  if (find(bytes) != kNone) return false;
  if ((size_ + 1) * 2 > slots_.size()) grow();  // load factor <= 1/2 keeps probes short
  if (rank >= offset_.size()) {
    offset_.resize(rank + 1, 0);
    length_.resize(rank + 1, 0);
  }
  if (length_[rank] != 0) return false;  // two tokens with one rank
  offset_[rank] = static_cast<uint32_t>(arena_.size());
  length_[rank] = static_cast<uint32_t>(bytes.size());
  arena_.append(bytes);
  const uint64_t h = hash_bytes(bytes);
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].rank != kNone) i = (i + 1) & mask;
  slots_[i] = Slot{static_cast<uint32_t>(h >> 32), rank};
  ++size_;
  return true;
}

uint32_t RankTable::find(std::string_view bytes, uint64_t h) const {
  if (slots_.empty()) return kNone;
  const size_t mask = slots_.size() - 1;
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.rank == kNone) return kNone;
    if (s.tag == tag && same(s.rank, bytes)) return s.rank;
  }
}

namespace {

// A single byte is always a token in a byte-level vocabulary (the loader checks this).
int32_t byte_rank(const RankTable& ranks, std::string_view bytes) {
  uint32_t r = ranks.find(bytes);
  KILN_CHECK(r != RankTable::kNone) << "BPE vocabulary lacks a token for a merged part";
  return static_cast<int32_t>(r);
}

}  // namespace

void merge_linear(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out) {
  // parts[k] = {start byte, rank of merging part k with part k+1}; two sentinels at the end.
  struct Part {
    uint32_t start, rank;
  };
  thread_local std::vector<Part> parts;
  const size_t n = piece.size();
  parts.clear();
  for (size_t i = 0; i + 1 < n; ++i) parts.push_back({static_cast<uint32_t>(i), ranks.find(piece.substr(i, 2))});
  parts.push_back({static_cast<uint32_t>(n - 1), RankTable::kNone});
  parts.push_back({static_cast<uint32_t>(n), RankTable::kNone});
  auto pair_rank = [&](size_t k) -> uint32_t {
    if (k + 2 >= parts.size()) return RankTable::kNone;
    return ranks.find(piece.substr(parts[k].start, parts[k + 2].start - parts[k].start));
  };
  for (;;) {
    uint32_t best = RankTable::kNone;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      if (parts[k].rank < best) {  // strict: the leftmost of equal ranks wins
        best = parts[k].rank;
        at = k;
      }
    }
    if (best == RankTable::kNone) break;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    parts[at].rank = pair_rank(at);
    if (at > 0) parts[at - 1].rank = pair_rank(at - 1);
  }
  for (size_t k = 0; k + 1 < parts.size(); ++k) {  // every part but the end sentinel
    out.push_back(byte_rank(ranks, piece.substr(parts[k].start, parts[k + 1].start - parts[k].start)));
  }
}

void merge_heap(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out) {
  // Node i is the part starting at byte i (while alive); end[i] is where it stops, so the
  // part after it is node end[i]. A heap entry (rank, start, version) proposes merging
  // node `start` with its successor; it is stale once the node's version moved on.
  const uint32_t n = static_cast<uint32_t>(piece.size());
  std::vector<uint32_t> end(n), prev(n), version(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    end[i] = i + 1;
    prev[i] = i == 0 ? RankTable::kNone : i - 1;
  }
  struct Entry {
    uint32_t rank, start, version;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto propose = [&](uint32_t i) {
    if (i == RankTable::kNone || end[i] >= n) return;
    uint32_t r = ranks.find(piece.substr(i, end[end[i]] - i));
    if (r != RankTable::kNone) heap.push({r, i, version[i]});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) propose(i);
  while (!heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    if (e.version != version[e.start]) continue;
    uint32_t i = e.start, j = end[i];
    end[i] = end[j];
    version[j] = ~0u;  // dead: no entry of j is valid any more
    if (end[i] < n) prev[end[i]] = i;
    ++version[i];
    propose(i);
    if (prev[i] != RankTable::kNone) {
      ++version[prev[i]];
      propose(prev[i]);
    }
  }
  for (uint32_t i = 0; i < n; i = end[i]) out.push_back(byte_rank(ranks, piece.substr(i, end[i] - i)));
}

namespace {

// A direct-mapped, per-thread cache of merged pieces: English text repeats its words, and a
// hit costs one hash (already computed for the whole-piece lookup) and one compare.
struct PieceCache {
  static constexpr size_t kEntries = 4096, kMaxBytes = 24, kMaxIds = 6;
  struct Entry {
    uint64_t table = 0;  // RankTable::id(); ids start at 1
    uint64_t hash = 0;
    uint8_t length = 0, count = 0;
    char bytes[kMaxBytes];
    int32_t ids[kMaxIds];
  };
  Entry entries[kEntries];
};

}  // namespace

void encode_piece(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out) {
  if (piece.empty()) return;
  // A piece that is itself a token is that token, as in tiktoken (BPE might not reach it).
  const uint64_t h = RankTable::hash_bytes(piece);
  uint32_t whole = ranks.find(piece, h);
  if (whole != RankTable::kNone) {
    out.push_back(static_cast<int32_t>(whole));
    return;
  }
  if (piece.size() >= kHeapMergeMinBytes) {
    merge_heap(piece, ranks, out);
    return;
  }
  thread_local std::unique_ptr<PieceCache> cache = std::make_unique<PieceCache>();
  const bool cacheable = piece.size() <= PieceCache::kMaxBytes;
  PieceCache::Entry& e = cache->entries[(h >> 7) % PieceCache::kEntries];
  if (cacheable && e.table == ranks.id() && e.hash == h && e.length == piece.size() &&
      std::memcmp(e.bytes, piece.data(), piece.size()) == 0) {
    out.insert(out.end(), e.ids, e.ids + e.count);
    return;
  }
  const size_t first = out.size();
  merge_linear(piece, ranks, out);
  const size_t count = out.size() - first;
  if (cacheable && count <= PieceCache::kMaxIds) {
    e.table = ranks.id();
    e.hash = h;
    e.length = static_cast<uint8_t>(piece.size());
    e.count = static_cast<uint8_t>(count);
    std::memcpy(e.bytes, piece.data(), piece.size());
    std::copy(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), e.ids);
  }
}

}  // namespace kiln::data::bpe
