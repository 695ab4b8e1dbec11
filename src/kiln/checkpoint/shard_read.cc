#include "kiln/checkpoint/shard_read.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

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

Result<int64_t> read_block_into(const std::string& path, uint64_t data_offset, const Region& s, std::string& dst,
                                const Region& t, int elem_size, const std::string& what) {
  const size_t rank = s.dims.size();
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(s.offset[d], t.offset[d]);
    hi[d] = std::min(s.offset[d] + s.dims[d], t.offset[d] + t.dims[d]);
    if (hi[d] <= lo[d]) return 0;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("opening {}: {}", path, std::strerror(errno));
  int64_t total = 0;
  // A pending run (file offset, block offset, bytes), flushed when the next one is not adjacent.
  int64_t run_src = 0, run_dst = 0, run_len = 0;
  Status st;
  auto flush = [&]() {
    if (run_len > 0 && st.ok()) {
      st = pread_fd_all(fd, dst.data() + run_dst, static_cast<size_t>(run_len),
                        data_offset + static_cast<uint64_t>(run_src), path, what);
      total += run_len;
    }
    run_len = 0;
  };
  if (rank == 0) {
    run_len = elem_size;
    flush();
  } else {
    std::vector<int64_t> ss(rank, 1), ts(rank, 1);  // row-major strides (elements)
    for (size_t d = rank - 1; d-- > 0;) {
      ss[d] = ss[d + 1] * s.dims[d + 1];
      ts[d] = ts[d + 1] * t.dims[d + 1];
    }
    const int64_t run = (hi[rank - 1] - lo[rank - 1]) * elem_size;
    std::vector<int64_t> idx(lo);
    for (bool more = true; more && st.ok();) {
      int64_t so = 0, to = 0;
      for (size_t d = 0; d < rank; ++d) {
        so += (idx[d] - s.offset[d]) * ss[d];
        to += (idx[d] - t.offset[d]) * ts[d];
      }
      so *= elem_size;
      to *= elem_size;
      if (run_len > 0 && run_src + run_len == so && run_dst + run_len == to) {
        run_len += run;  // adjacent in the file and in the block: one read
      } else {
        flush();
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
    flush();
  }
  ::close(fd);
  if (!st.ok()) return st;
  return total;
}

}  // namespace kiln::checkpoint
