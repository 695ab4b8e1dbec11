// ReduceScatterCombinerPass ("reduce_scatter_combiner"): independent small reduce-scatters
// over the same devices become one, as XLA's ReduceScatterCombiner does (the gradients of a
// layer's small weights: norm scales, biases, small projections).
//
// Which reduce-scatters merge is passes/combiner_groups.h (threshold, cap, independence, one
// compute step). A reduce-scatter sends chunk r of its operand to device r, so the combined
// operand must hold every device's share contiguously: member j scattering x_j along d_j
// (x_j = [A_j, g * n_j, B_j] around d_j, k_j = A_j * n_j * B_j) becomes
//     A_j == 1: reshape x_j to [g, k_j]
//     else:     reshape [A_j, g, n_j, B_j] -> transpose to [g, A_j, n_j, B_j] -> reshape [g, k_j]
//     -> concatenate along 1 -> [g, K] -> reshape [g * K] -> reduce_scatter dim 0 -> [K]
//     -> slice [o_j, o_j + k_j) -> reshape to the member's result [A_j, n_j, B_j]
// Each element is summed with the same elements of the same devices in the same rank order
// as before (the runtime adds element by element), so results are bit for bit the separate
// reduce-scatters'. Any scatter dimension is accepted (an inner one costs a transpose, which
// the concatenation copies again; all of these are small).
//
// Place: as all_gather_combiner, after remat and regather and before fusion and
// async_collectives. KILN_COMBINE_THRESHOLD_KB=0 turns it off.
//
// Overlap: a combined reduce-scatter's done is read by one slice per member; the
// latency-hiding pass delays all of them to their readers or none (sched/latency_hiding.h),
// so the done can move past earlier layers' backward. On gpt-oss-tiny fsdp=2, 19 of the 101
// pairs run back to back with the combiners against 20 of 117 without; on the reference
// config the 16 combined reduce-scatters (a router weight's and a norm scale's gradients)
// still run back to back.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class ReduceScatterCombinerPass : public Pass {
 public:
  std::string_view name() const override { return "reduce_scatter_combiner"; }
  Result<bool> run(ir::Module& module) override;

  // Reduce-scatters the last run removed by merging (n merged into one removes n - 1).
  int64_t removed() const { return removed_; }

 private:
  int64_t removed_ = 0;
};

}  // namespace kiln::passes
