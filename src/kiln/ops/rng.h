// The counter-based random generator behind the rng op, shared by its reference evaluation
// and every backend's kernel so that all of them draw the same values.
//
// Element e of an rng result is a function of (seed, the element's row-major index in the
// *global* array) only. A per-device program that makes one block of a split array (the
// partitioner lowers an rng whose users want it split to the local block, with a `split`
// attribute) therefore produces exactly the elements of the one-device array: the initial
// parameters are identical on every mesh, and no device ever makes the whole array.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/attrs.h"
#include "kiln/ir/dtype.h"
#include "kiln/ir/instr.h"

namespace kiln::ops {

enum class RngDistribution { kUniform, kNormal, kTruncatedNormal };

RngDistribution rng_distribution(const ir::Instr& rng);

// The generator. Element e draws 64 bits from SplitMix64's output function at counter e
// (uniform) or 64 e + attempt (normal, truncated normal) of the seed's stream, and turns
// them into an f32 value with f32 arithmetic: uniform in [0, 1) from 24 bits; a standard
// normal by Box-Muller (23 bits for the radius, so |z| <= 5.77 as for JAX's f32 normal,
// and 24 for the angle) with the logarithm and cosine as short polynomials; a standard
// normal truncated to [-2, 2] by redrawing. rng.cc is compiled without contracting a * b + c
// into one FMA, so the vector loop, its scalar tail and every backend give the same bits
// whatever the instruction set: only IEEE additions, multiplications, divisions and square
// roots, each rounded once.
//
// Global elements [first, first + count) into out: the whole cost of a run's start-up, so
// it is written for the vectoriser (about 1 ns per element on one AVX-512 core).
void rng_fill(RngDistribution dist, int64_t seed, int64_t first, int64_t count, float* out);

// Global element `counter` alone: rng_fill's value, bit for bit.
float rng_value(RngDistribution dist, int64_t seed, int64_t counter);

// A uniform value rounded to `dtype`, kept below 1 (bf16 rounds 0.998 up to 1).
double round_uniform(ir::DType dtype, double value);

// The `split` attribute of a per-device rng: the mesh axes each dimension is split over,
// dims separated by ';', axes by ',' ("fsdp;" : dim 0 over fsdp, dim 1 whole).
std::string format_split(const ir::Sharding& sharding);
ir::Sharding parse_split(const std::string& text, int rank);

// Where this thread's device's block sits in the global array: the global dims and the
// block's offset per dimension (the whole array, offset 0, without a `split` attribute).
struct RngBlock {
  std::vector<int64_t> global_dims;
  std::vector<int64_t> offset;
};
RngBlock rng_block(const ir::Instr& rng);

// Calls fn(local_begin, global_begin, count) for the local elements [begin, end) of the
// block, in row-major order, as runs that are contiguous in the global array too (at most
// one row each; one division per row).
template <typename Fn>
void for_each_global_run(const RngBlock& block, const std::vector<int64_t>& local_dims, int64_t begin, int64_t end,
                         Fn&& fn) {
  const int rank = static_cast<int>(local_dims.size());
  if (rank == 0) {
    if (begin < end) fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  const int64_t row = local_dims[rank - 1];
  if (row == 0) return;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t at = begin; at < end;) {
    // The row of local element `at`, then its global row start.
    int64_t rest = at / row;
    for (int d = rank - 2; d >= 0; --d) {
      idx[d] = rest % local_dims[d];
      rest /= local_dims[d];
    }
    const int64_t col = at % row;
    int64_t global = 0;
    for (int d = 0; d < rank - 1; ++d) global = global * block.global_dims[d] + idx[d] + block.offset[d];
    global = global * block.global_dims[rank - 1] + block.offset[rank - 1] + col;
    const int64_t stop = std::min(end, at - col + row);
    fn(at, global, stop - at);
    at = stop;
  }
}

}  // namespace kiln::ops
