// ReduceScatterReassociatePass ("reduce_scatter_reassociate"): a sum of reduce-scatters
// becomes one reduce-scatter of the sum, as XLA's ReduceScatterReassociate does:
//     add(f(reduce_scatter(a)), f(reduce_scatter(b)))  ->  f(reduce_scatter(add(a, b)))
// where the two reduce-scatters have the same attributes (dimension, group, mesh axes),
// shape and dtype, and f is the same chain of rearrangements on both sides (transposes,
// reshapes: ops whose registry entry says `rearranges`, linear maps, so f(x) + f(y) =
// f(x + y)). Each reduce-scatter and each step of its chain must be read by that add only
// (otherwise the scattered value is still needed and nothing is saved). A chain may also
// widen once (convert bf16 -> f32: partial gradients computed in bf16, accumulated in f32):
// then the partials are summed in the wide type and rounded once to the scatter's type,
//     add(cvt_f32(rs(a)), cvt_f32(rs(b)))  ->  cvt_f32(rs(cvt_bf16(cvt_f32(a) + cvt_f32(b)))),
// and a later merge adds to that wide sum, not to its rounding, so n partials round once.
//
// Why: a weight used several times in a step (the unembedding of the loss's vocab tiles, a
// weight shared by micro-batches) gets one partial gradient per use, and the partitioner
// reduce-scatters each of them: 32 loss tiles moved the whole [V, D] gradient 32 times.
// Summed first, it moves once; the unreduced sum is one buffer of the partials' size.
// The sum is the same numbers added in another order (per device first, then across
// devices), equal up to rounding.
//
// One sweep in post order turns a chain of adds of n reduce-scatters into one (each add meets
// the previous merge as its operand). Place: on the partitioned program, after its cleanups
// and before the reduce-scatter combiner.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class ReduceScatterReassociatePass : public Pass {
 public:
  std::string_view name() const override { return "reduce_scatter_reassociate"; }
  Result<bool> run(ir::Module& module) override;
};

}  // namespace kiln::passes
