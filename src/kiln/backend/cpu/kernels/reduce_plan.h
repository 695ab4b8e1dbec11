// How a reduction over an input viewed as [outer, red, inner] is cut into parallel work
// items, shared by the native reductions and the generated input fusions so both sum in the
// same order.
//
// inner == 1 (a row reduction): each row is read contiguously into kReduceLanes independent
// accumulators (the compiler vectorizes across them; one accumulator is a dependency chain
// that runs at a quarter of the adder's rate), which are then combined in a fixed order.
// inner > 1: blocks of `block` inner positions accumulate whole rows at a time.
// When outer x blocks gives too few work items for the threads (a full reduction has one),
// the reduced dimension is also split into `splits` chunks whose partial results are
// combined in chunk order afterwards. Every choice depends on the shape only, never on the
// thread count, so results are the same on any machine.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::backend::cpu {

inline constexpr int64_t kReduceLanes = 16;

struct ReducePlan {
  int64_t outer = 1, red = 1, inner = 1;
  int64_t block = 1, blocks = 1;  // inner positions per work item, and how many such blocks
  int64_t splits = 1, chunk = 1;  // pieces of the reduced dimension, and the length of each
  int64_t items() const { return outer * blocks * splits; }
};

inline ReducePlan plan_reduction(int64_t outer, int64_t red, int64_t inner) {
  // Enough items to keep 16 threads busy; no split smaller than this many elements.
  constexpr int64_t kTargetItems = 16, kMinSplitElements = 4096;
  ReducePlan p{outer, red, inner};
  p.block = inner == 1 ? 1 : std::min<int64_t>(inner, 256);
  p.blocks = (inner + p.block - 1) / p.block;
  int64_t items = outer * p.blocks;
  if (items < kTargetItems && red > 1) {
    int64_t wanted = (kTargetItems + items - 1) / items;
    int64_t by_size = std::max<int64_t>(1, red * p.block / kMinSplitElements);
    p.splits = std::clamp<int64_t>(std::min(wanted, by_size), 1, red);
  }
  p.chunk = std::max<int64_t>(1, (red + p.splits - 1) / p.splits);
  p.splits = std::max<int64_t>(1, (red + p.chunk - 1) / p.chunk);  // no empty trailing chunk
  return p;
}

}  // namespace kiln::backend::cpu
