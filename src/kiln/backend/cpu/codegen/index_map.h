// Index maps of a loop fusion's mapped reads, and the row loop plan that evaluates them.
//
// A transpose, broadcast, slice or pad of a fusion parameter is not computed inside a loop
// fusion: it is a read of the parameter at another index. Over the loop dims [d0 .. dR-1]
// (the result's), the element read at loop index (i0 .. iR-1) is at offset
// offset + sum_d i_d * stride[d] in the parameter: a transpose's strides are the parameter's
// own, permuted; a broadcast's are 0 along the dims it adds or expands; a slice's are the
// parameter's own times the slice's steps, and its offset is where the window starts. A
// pad's are the parameter's own, its offset minus where the parameter lands, and it has a
// window: per dim, the loop indices [lo, hi) that hold the parameter; elsewhere the value is
// the pad's, and the kernel names the test `win<n>` (the offset is not read there). The
// expression names the offset `map<n>` and never depends on how the loop computes it
// (CONVENTIONS example 7).
//
// Loop plan (chosen here, separately): size-1 dims are dropped, trailing dims every read
// walks contiguously (stride[d] == stride[d+1] * dims[d+1] for every map) are coalesced into
// one inner axis, the output's contiguous one; the remaining dims form rows. Threads split
// the rows; the inner loop is an `omp simd` loop whose mapped reads are loads at a constant
// stride (0: one value broadcast to the lanes; 1: contiguous; otherwise a strided load, what
// a transposed read costs). Kernel shapes, for loop dims D and m mapped reads:
//   in[k]   parameter k: the loop dims (read at idx) or any shape (read at map<n>)
//   out     the loop dims, row-major (idx = row * inner + j)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/instr.h"
#include "kiln/passes/fusion.h"  // is_mapped_read

namespace kiln::backend::cpu {

// An element offset that is affine in the loop index: offset + sum_d i_d * strides[d].
struct IndexMap {
  std::vector<int64_t> strides;  // per loop dim
  int64_t offset = 0;
  // Empty, or per loop dim the indices [window_lo, window_hi) where the offset is read.
  std::vector<int64_t> window_lo, window_hi;
  bool has_window() const { return !window_lo.empty(); }
};

// Where `read` (a transpose, broadcast, slice or pad whose result has the loop dims) reads
// its operand 0.
IndexMap mapped_read_map(const ir::Instr& read);
// The offset that is a fused iota's value: stride 1 along its dim, 0 along the others (the
// iota's dims are the loop dims).
IndexMap iota_map(const ir::Instr& iota);

// A loop kernel over `loop_dims` whose statements (`hoisted` before the loop; `loop` and
// `stores` inside it, indexing outputs and same-shape inputs with `idx`) read mapped operands
// at `map<n>`, n indexing `maps`, and those with a window only where `win<n>` holds.
std::string row_loop_kernel(const std::string& name, const std::string& hoisted, const std::string& pointers,
                            const std::string& loop, const std::string& stores,
                            const std::vector<int64_t>& loop_dims, const std::vector<IndexMap>& maps);

}  // namespace kiln::backend::cpu
