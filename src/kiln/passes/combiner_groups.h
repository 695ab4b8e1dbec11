// Which small collectives of one kind may become one: the grouping rule shared by
// AllGatherCombinerPass and ReduceScatterCombinerPass (as XLA's AllGatherCombiner and
// ReduceScatterCombiner share their combiner utilities).
//
// A candidate is a collective of the kind whose full (unsharded) value has at most
// `candidate_bytes`: the gathered result of an all-gather, the summed operand of a
// reduce-scatter. Candidates may merge when all of these hold:
//   - same dtype and group (mesh_axes, group_size): one runtime call moves one dtype over one
//     set of devices;
//   - both recomputation for the backward pass (names ending ".remat" or ".regather", which
//     the memory scheduler runs lazily, right before their first reader), or neither: a
//     recomputed value has the depth of the forward value it repeats but runs much later;
//   - independent: the same number of collectives of the kind on the longest path reaching
//     each (one that depends on another has a larger count), as all_reduce_combiner does;
//   - close in time: compute steps at most one apart, so combining never glues a weight
//     needed by the first layer to one needed by the last, which would gather the latter a
//     whole step early (memory) and make the former wait for it (no overlap). The compute
//     depth of a value is the number of compute-bound instructions (the cost model's FLOPs
//     exceed its bytes: the products and attention) on the longest path reaching it. An
//     all-gather's step is when its result is first needed: the smallest, over its readers,
//     of the deepest operand of the reader. A reduce-scatter's is when its input is ready:
//     the depth of its operand. In a decoder layer the input norm's scale and the q, k and v
//     projections' weights share a step, the router's weight has a later one, and the
//     backward pass's re-gathers and gradients have steps of their own; one step of slack
//     lets a bias added after a product join the product's weight, and a bias's gradient (a
//     sum) the weight gradient (a product) beside it.
// Within such a class, candidates in order of step fill bins: a bin closes when the next
// candidate's step is more than one past its first member's or its bytes would pass
// `combined_bytes`; every bin of two or more becomes one collective.
//
// Names are not used: a weight gathered straight from a parameter carries none, so layers
// cannot be told apart by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"

namespace kiln::passes {

struct CombineLimits {
  static constexpr int64_t kCandidateBytes = 64 << 10;  // per candidate's full value
  static constexpr int64_t kCombinedBytes = 4 << 20;    // per combined collective
  int64_t candidate_bytes = kCandidateBytes;
  int64_t combined_bytes = kCombinedBytes;
};

// The defaults, or KILN_COMBINE_THRESHOLD_KB (per candidate; 0 turns both combiners off) and
// KILN_COMBINE_LIMIT_KB (per combined collective) from the environment; a value that is not
// a non-negative integer is an error naming the variable.
Result<CombineLimits> combine_limits_from_env();

// Bins of two or more candidates of `kind` (kAllGather or kReduceScatter) that may become one
// collective, each in program order, the bins in program order of their first member.
std::vector<std::vector<ir::Instr*>> combinable_groups(const ir::Computation& comp, ir::Opcode kind,
                                                       const CombineLimits& limits);

// A shape as [outer, n, inner] around dimension `dim` (the products of the dimensions before
// and after it).
struct AroundDim {
  int64_t outer = 1, n = 1, inner = 1;
};
AroundDim around_dim(const std::vector<int64_t>& dims, int64_t dim);

// The combined collective's name: the first member's, so a backward re-gather keeps its
// ".regather" suffix (scheduled lazily) and its layer ("layers.N.", which the latency-hiding
// limit counts).
std::string combined_name(const std::vector<ir::Instr*>& members);

}  // namespace kiln::passes
