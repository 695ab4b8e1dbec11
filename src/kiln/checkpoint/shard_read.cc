#include "kiln/checkpoint/shard_read.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "kiln/base/hash.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

bool region_contains(const Region& outer, const Region& inner) {
  for (size_t d = 0; d < outer.dims.size(); ++d) {
    if (inner.offset[d] < outer.offset[d] || inner.offset[d] + inner.dims[d] > outer.offset[d] + outer.dims[d]) {
      return false;
    }
  }
  return true;
}

namespace {

// The overlap of `s` (stored) and `t` (the block wanted) as runs of contiguous bytes,
// (offset in s's bytes, offset in t's bytes, length), adjacent runs merged; false when they
// do not overlap.
bool overlap_runs(const Region& s, const Region& t, int elem_size,
                  const std::function<void(int64_t src, int64_t dst, int64_t len)>& run_fn) {
  const size_t rank = s.dims.size();
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(s.offset[d], t.offset[d]);
    hi[d] = std::min(s.offset[d] + s.dims[d], t.offset[d] + t.dims[d]);
    if (hi[d] <= lo[d]) return false;
  }
  if (rank == 0) {
    run_fn(0, 0, elem_size);
    return true;
  }
  std::vector<int64_t> ss(rank, 1), ts(rank, 1);  // row-major strides (elements)
  for (size_t d = rank - 1; d-- > 0;) {
    ss[d] = ss[d + 1] * s.dims[d + 1];
    ts[d] = ts[d + 1] * t.dims[d + 1];
  }
  const int64_t run = (hi[rank - 1] - lo[rank - 1]) * elem_size;
  int64_t run_src = 0, run_dst = 0, run_len = 0;  // the pending run
  std::vector<int64_t> idx(lo);
  for (bool more = true; more;) {
    int64_t so = 0, to = 0;
    for (size_t d = 0; d < rank; ++d) {
      so += (idx[d] - s.offset[d]) * ss[d];
      to += (idx[d] - t.offset[d]) * ts[d];
    }
    so *= elem_size;
    to *= elem_size;
    if (run_len > 0 && run_src + run_len == so && run_dst + run_len == to) {
      run_len += run;  // adjacent in the file and in the block: one run
    } else {
      if (run_len > 0) run_fn(run_src, run_dst, run_len);
      run_src = so, run_dst = to, run_len = run;
    }
    more = false;
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < hi[d]) {
        more = true;
        break;
      }
      idx[d] = lo[d];
    }
  }
  if (run_len > 0) run_fn(run_src, run_dst, run_len);
  return true;
}

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<int64_t> read_block_into(const std::string& path, uint64_t data_offset, const Region& s, std::string& dst,
                                const Region& t, int elem_size, const std::string& what) {
  std::vector<std::array<int64_t, 3>> runs;
  if (!overlap_runs(s, t, elem_size, [&](int64_t a, int64_t b, int64_t n) { runs.push_back({a, b, n}); })) return 0;
  const Fd fd(path);
  if (fd.get() < 0) return io_error("opening {}: {}", path, std::strerror(errno));
  int64_t total = 0;
  for (const auto& [src, at, len] : runs) {
    KILN_RETURN_IF_ERROR(pread_fd_all(fd.get(), dst.data() + at, static_cast<size_t>(len),
                                      data_offset + static_cast<uint64_t>(src), path, what));
    total += len;
  }
  return total;
}

Result<int64_t> read_block_checked(const std::string& path, uint64_t data_offset, const Region& s, std::string& dst,
                                   const Region& t, int elem_size, const std::string& what, int64_t block_bytes,
                                   const std::vector<std::string>& block_sums) {
  const int64_t piece_bytes = s.num_elements() * elem_size;
  const int64_t blocks = (piece_bytes + block_bytes - 1) / block_bytes;
  if (static_cast<int64_t>(block_sums.size()) != blocks) {
    return data_loss("{}: the manifest has {} block checksums for {} bytes, expected {}", what, block_sums.size(),
                     piece_bytes, blocks);
  }
  std::vector<std::array<int64_t, 3>> runs;
  if (!overlap_runs(s, t, elem_size, [&](int64_t a, int64_t b, int64_t n) { runs.push_back({a, b, n}); })) return 0;
  std::vector<bool> touched(static_cast<size_t>(blocks), false);
  for (const auto& [src, at, len] : runs) {
    for (int64_t b = src / block_bytes; b <= (src + len - 1) / block_bytes; ++b) touched[b] = true;
  }
  const Fd fd(path);
  if (fd.get() < 0) return io_error("opening {}: {}", path, std::strerror(errno));
  // Consecutive touched blocks are read with one pread each range; only those stay in memory.
  std::map<int64_t, std::string> loaded;  // first block of a range -> its bytes
  int64_t total = 0;
  for (int64_t b = 0; b < blocks;) {
    if (!touched[b]) {
      ++b;
      continue;
    }
    int64_t e = b;
    while (e < blocks && touched[e]) ++e;
    const int64_t begin = b * block_bytes, end = std::min(e * block_bytes, piece_bytes);
    std::string bytes(static_cast<size_t>(end - begin), '\0');
    KILN_RETURN_IF_ERROR(pread_fd_all(fd.get(), bytes.data(), bytes.size(), data_offset + static_cast<uint64_t>(begin),
                                      path, what));
    total += end - begin;
    for (int64_t k = b; k < e; ++k) {
      const int64_t kb = k * block_bytes - begin, ke = std::min((k + 1) * block_bytes, piece_bytes) - begin;
      const std::string sum = fmt::format("{:016x}", fnv1a64(std::string_view(bytes).substr(kb, ke - kb)));
      if (sum != block_sums[k]) {
        return data_loss("{} fails its checksum in block {} of {} (bytes {}..{} of the piece; fnv1a64 {} in the "
                         "manifest, {} on disk): the checkpoint is corrupt",
                         what, k, blocks, k * block_bytes, kb + begin + (ke - kb), block_sums[k], sum);
      }
    }
    loaded.emplace(b, std::move(bytes));
    b = e;
  }
  for (const auto& [src, at, len] : runs) {
    // The range holding src: the last one starting at or before its block.
    auto it = std::prev(loaded.upper_bound(src / block_bytes));
    std::memcpy(dst.data() + at, it->second.data() + (src - it->first * block_bytes), static_cast<size_t>(len));
  }
  return total;
}

}  // namespace kiln::checkpoint
