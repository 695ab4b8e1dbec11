// MultiOutputFusionPass ("multi_output_fusion"): merges a loop fusion into a fusion that
// consumes it, when the producer's value is also needed elsewhere, so the merged kernel
// computes it once, stores it for its other users and uses it directly (XLA's
// producer-consumer multi-output fusion). Runs after FusionPass.
//
// The AdamW update is the case it exists for: the new first and second moments are step
// outputs AND operands of the parameter update; unmerged, three kernels read the clipped
// gradient, the moments and the parameter again (about 13 tensor passes per parameter);
// merged, one kernel reads g, p, mu, nu once and writes p', mu', nu' (7 passes).
//
// A merge happens when:
//   - the producer is a loop fusion whose dims are the consumer's loop dims (the consumer's
//     result dims for a loop fusion, its reduction's input dims for an input fusion), so both
//     run in one loop over the same index. It may have several outputs, read through
//     get_tuple_elements (an earlier merge: with bf16 weight copies the copy's convert absorbs
//     the AdamW update first, and the parameter norm's reduction then takes that whole kernel,
//     as it takes the update alone in float32 runs); it moves whole;
//   - no path leads from the producer's other users back to the consumer (the merged
//     instruction would depend on itself); an exact walk, cut off at the consumer's place in
//     the topological order, so the decision does not depend on the model's depth;
//   - the merged fusion has a place in that order: its operands all come before the
//     producer's other readers (otherwise other instructions would have to move);
//   - the merged body stays small enough for one kernel (operands and outputs bounded);
//   - the consumer does not recompute for the backward pass (RematPass's "*.remat",
//     RegatherPass's "*.regather") unless the producer does too: merged into a forward
//     kernel, the recomputation would run in the forward pass and live until the backward.
// Nothing is ever computed twice: the producer's body moves into the consumer's; each of its
// values becomes an extra output only while something outside still reads it. Every merge
// and every refusal logs its reason at KILN_VLOG(2).
//
// The merged fusion's result is a tuple: the consumer's outputs first (so existing
// get_tuple_element users keep their indices), then the producer's values still read
// elsewhere, in the producer's order.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class MultiOutputFusionPass : public Pass {
 public:
  std::string_view name() const override { return "multi_output_fusion"; }
  Result<bool> run(ir::Module& module) override;
};

}  // namespace kiln::passes
