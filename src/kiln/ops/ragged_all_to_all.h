// The exchange plan of a ragged all-to-all (ragged_all_to_all_op.cc), shared by the
// reference evaluation and the CPU kernel so both move exactly the same rows.
//
// A source holds `rows` rows sorted by destination: sizes[d] rows for destination d, one
// block after the other. Destination d receives them in the source's slot of `slot` rows.
// Negative sizes count as 0, blocks are cut at `rows` (rows that do not exist are not
// sent) and at `slot` (a capacity: the rows past it are dropped).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kiln::ops {

struct RaggedPlan {
  std::vector<int64_t> offset;  // per destination: first row of its block in the source
  std::vector<int64_t> count;   // per destination: rows sent (<= slot)
};

template <typename T>
RaggedPlan ragged_plan(const T* sizes, int64_t group_size, int64_t rows, int64_t slot) {
  RaggedPlan p;
  int64_t at = 0;
  for (int64_t d = 0; d < group_size; ++d) {
    const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(sizes[d]));
    const int64_t begin = std::min(at, rows);
    p.offset.push_back(begin);
    p.count.push_back(std::min({n, rows - begin, slot}));
    at = begin + std::min(n, rows - begin);
  }
  return p;
}

}  // namespace kiln::ops
