#include "kiln/data/tokenizer/hf_bpe.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <queue>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"

namespace kiln::data::hf {

BpeModel::BpeModel() { std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1); }

bool BpeModel::add_token(std::string_view bytes, int32_t id) {
  KILN_CHECK(id >= 0 && !bytes.empty());
  if (!vocab_.insert(bytes, static_cast<uint32_t>(id))) return false;
  if (bytes.size() == 1) byte_ids_[static_cast<unsigned char>(bytes[0])] = id;
  return true;
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank) {
  pairs_.insert_or_assign(static_cast<uint32_t>(left), static_cast<uint32_t>(right), {rank, merged});
}

void BpeModel::note_reachable(std::string_view bytes, int32_t id) {
  if (static_cast<size_t>(id) >= reachable_.size()) reachable_.resize(static_cast<size_t>(id) + 1, 0);
  thread_local std::vector<int32_t> ids;
  ids.clear();
  if (bytes.size() >= bpe::kHeapMergeMinBytes) merge_heap(bytes, ids);
  else merge_linear(bytes, ids);
  reachable_[static_cast<size_t>(id)] = ids.size() == 1 && ids[0] == id;
}

int BpeModel::missing_byte() const {
  for (int b = 0; b < 256; ++b) {
    if (byte_ids_[b] < 0) return b;
  }
  return -1;
}

void BpeModel::PairTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = mix64(s.key) & mask;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void BpeModel::PairTable::insert_or_assign(uint32_t left, uint32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) grow();  // load factor <= 1/2 keeps probes short
  const uint64_t key = (uint64_t{left} << 32) | right;
  const size_t mask = slots_.size() - 1;
  size_t i = mix64(key) & mask;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i] = Slot{key, merge};
}

BpeModel::PairTable::Merge BpeModel::PairTable::find(uint32_t left, uint32_t right) const {
  if (slots_.empty()) return kNoMerge;
  const uint64_t key = (uint64_t{left} << 32) | right;
  const size_t mask = slots_.size() - 1;
  for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key == key) return s.merge;
    if (s.key == kEmpty) return kNoMerge;
  }
}

void BpeModel::merge_linear(std::string_view piece, std::vector<int32_t>& out) const {
  // parts[k]: the id of part k and the merge of part k with part k+1 (kNoMerge for the last).
  struct Part {
    int32_t id;
    PairTable::Merge next;
  };
  thread_local std::vector<Part> parts;
  const size_t n = piece.size();
  parts.resize(n);
  for (size_t i = 0; i < n; ++i) parts[i].id = byte_id(static_cast<unsigned char>(piece[i]));
  for (size_t i = 0; i + 1 < n; ++i) parts[i].next = pair(parts[i].id, parts[i + 1].id);
  parts[n - 1].next = PairTable::kNoMerge;
  for (;;) {
    uint32_t best = PairTable::kNoMerge.rank;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      if (parts[k].next.rank < best) {  // strict: the leftmost of equal ranks wins
        best = parts[k].next.rank;
        at = k;
      }
    }
    if (best == PairTable::kNoMerge.rank) break;
    parts[at].id = parts[at].next.merged;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    parts[at].next = at + 1 < parts.size() ? pair(parts[at].id, parts[at + 1].id) : PairTable::kNoMerge;
    if (at > 0) parts[at - 1].next = pair(parts[at - 1].id, parts[at].id);
  }
  for (const Part& p : parts) out.push_back(p.id);
}

void BpeModel::merge_heap(std::string_view piece, std::vector<int32_t>& out) const {
  // `tokenizers`' own scheme: node i is the part starting at byte i (while alive) with its
  // id; next[i] is the node after it. A heap entry (rank, start, version) proposes merging
  // node `start` with its successor; it is stale once the node's version moved on.
  constexpr uint32_t kNone = 0xFFFFFFFFu;
  const uint32_t n = static_cast<uint32_t>(piece.size());
  std::vector<int32_t> id(n);
  std::vector<uint32_t> next(n), prev(n), version(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    id[i] = byte_id(static_cast<unsigned char>(piece[i]));
    next[i] = i + 1;
    prev[i] = i == 0 ? kNone : i - 1;
  }
  struct Entry {
    uint32_t rank, start, version;
    int32_t merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto propose = [&](uint32_t i) {
    if (i == kNone || next[i] >= n) return;
    PairTable::Merge m = pair(id[i], id[next[i]]);
    if (m.merged >= 0) heap.push({m.rank, i, version[i], m.merged});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) propose(i);
  while (!heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    if (e.version != version[e.start]) continue;
    const uint32_t i = e.start, j = next[i];
    id[i] = e.merged;
    next[i] = next[j];
    version[j] = ~0u;  // dead: no entry of j is valid any more
    if (next[i] < n) prev[next[i]] = i;
    ++version[i];
    propose(i);
    if (prev[i] != kNone) {
      ++version[prev[i]];
      propose(prev[i]);
    }
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(id[i]);
}

namespace {

// A direct-mapped, per-thread cache of merged pieces, as bpe.cc's: ordinary text repeats its
// words, and a hit costs the piece's hash and one compare.
struct PieceCache {
  static constexpr size_t kEntries = 4096, kMaxBytes = 24, kMaxIds = 6;
  struct Entry {
    uint64_t table = 0;  // RankTable::id() of the model's vocabulary; ids start at 1
    uint64_t hash = 0;
    uint8_t length = 0, count = 0;
    char bytes[kMaxBytes];
    int32_t ids[kMaxIds];
  };
  Entry entries[kEntries];
};

}  // namespace

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_id(static_cast<unsigned char>(piece[0])));
    return;
  }
  const uint64_t h = bpe::RankTable::hash_bytes(piece);
  const uint32_t whole = vocab_.find(piece, h);
  if (whole != bpe::RankTable::kNone && (ignore_merges_ || (whole < reachable_.size() && reachable_[whole]))) {
    out.push_back(static_cast<int32_t>(whole));
    return;
  }
  if (piece.size() >= bpe::kHeapMergeMinBytes) {
    merge_heap(piece, out);
    return;
  }
  thread_local std::unique_ptr<PieceCache> cache = std::make_unique<PieceCache>();
  const bool cacheable = piece.size() <= PieceCache::kMaxBytes;
  PieceCache::Entry& e = cache->entries[(h >> 7) % PieceCache::kEntries];
  if (cacheable && e.table == vocab_.id() && e.hash == h && e.length == piece.size() &&
      std::memcmp(e.bytes, piece.data(), piece.size()) == 0) {
    out.insert(out.end(), e.ids, e.ids + e.count);
    return;
  }
  const size_t first = out.size();
  merge_linear(piece, out);
  const size_t count = out.size() - first;
  if (cacheable && count <= PieceCache::kMaxIds) {
    e.table = vocab_.id();
    e.hash = h;
    e.length = static_cast<uint8_t>(piece.size());
    e.count = static_cast<uint8_t>(count);
    std::memcpy(e.bytes, piece.data(), piece.size());
    std::copy(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), e.ids);
  }
}

}  // namespace kiln::data::hf
