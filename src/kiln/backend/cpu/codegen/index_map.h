// Index maps of a loop fusion's mapped reads, and the row loop plan that evaluates them.
//
// A transpose or a broadcast of a fusion parameter is not computed inside a loop fusion: it
// is a read of the parameter at another index. Over the loop dims [d0 .. dR-1] (the result's),
// the element read at loop index (i0 .. iR-1) is at offset sum_d i_d * stride[d] in the
// parameter: a transpose's strides are the parameter's own, permuted; a broadcast's are 0
// along the dims it adds or expands. The expression names the offset `map<n>` and never
// depends on how the loop computes it (CONVENTIONS example 7).
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

// Per loop dim, the element stride into the operand of `read` (a transpose or broadcast
// whose result has the loop dims).
std::vector<int64_t> mapped_read_strides(const ir::Instr& read);
// Per loop dim, the strides whose offset is a fused iota's value: 1 along its dim, 0 along the
// others (the iota's dims are the loop dims).
std::vector<int64_t> iota_strides(const ir::Instr& iota);

// A loop kernel over `loop_dims` whose statements (`hoisted` before the loop; `loop` and
// `stores` inside it, indexing outputs and same-shape inputs with `idx`) read mapped operands
// at `map<n>`, n indexing `maps` (per loop dim strides).
std::string row_loop_kernel(const std::string& name, const std::string& hoisted, const std::string& pointers,
                            const std::string& loop, const std::string& stores,
                            const std::vector<int64_t>& loop_dims, const std::vector<std::vector<int64_t>>& maps);

}  // namespace kiln::backend::cpu
