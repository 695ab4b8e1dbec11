// Rank-order sums for the reducing collectives. Both worlds call these, so LocalWorld and
// MpiWorld give the same bits: acc = x_0; acc += x_1; ... in rank order, in the accumulator
// type (f32 for f32 and bf16, f64 for f64, wrapping u32 for s32), rounded once at the end.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime {

// dst[0, count) = srcs[0][i] + srcs[1][i] + ... + srcs[n-1][i], in that order.
// dst may be one of srcs (same offsets): every block is read before it is written.
void sum_in_rank_order(ReduceDType dtype, const void* const* srcs, size_t n, void* dst,
                       size_t count);

// Element range [begin, end) of segment `index` when `count` elements are split into `parts`
// near-equal contiguous segments (the first count % parts segments get one more). all_reduce
// reduces segment r on rank r, then gathers them.
struct Segment {
  size_t begin = 0;
  size_t end = 0;
};
Segment segment_of(size_t count, size_t parts, size_t index);

// bf16 <-> f32 (round to nearest even; NaN stays NaN).
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);

}  // namespace kiln::runtime
