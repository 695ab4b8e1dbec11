// AllGatherCombinerPass ("all_gather_combiner"): independent small all-gathers over the same
// devices become one, as XLA's AllGatherCombiner does. Each collective is a meeting of its
// group (on virtual devices, a wait for the slowest peer) and a start/done pair for the
// latency-hiding scheduler; the small ones (norm scales, biases, small projections, token ids)
// cost more in meetings than in bytes.
//
// Which all-gathers merge (threshold, cap, independence, and the rule that keeps a group to
// one compute step so that overlap and peak memory stay as they were) is
// passes/combiner_groups.h. A group of n >= 2, member j gathering x_j along dimension d_j
// (x_j = [A_j, n_j, B_j] around d_j, k_j = A_j * n_j * B_j elements), becomes
//     reshape x_j to [k_j] -> concatenate -> all_gather dim 0 -> [g * K] -> reshape [g, K]
//     -> slice [:, o_j, o_j + k_j) = [g, k_j]
//     -> A_j == 1: reshape to the member's result [g * n_j, B_j]
//        else:     reshape [g, A_j, n_j, B_j] -> transpose to [A_j, g, n_j, B_j] -> reshape
// since a gather concatenates each device's chunk whole, the combined result is
// [dev0: x_0 x_1 .. | dev1: x_0 x_1 ..], and member j's chunks are a column block of it.
// Any gather dimension is accepted: an inner one (A_j > 1) costs a transpose, which a loop
// fusion reads in place when its readers are elementwise. The concatenation and the slices
// are small copies (library kernels: fusion takes neither), the reshapes are views. The
// values are only copied, so the results are the separate all-gathers' bit for bit.
//
// Place: in the backend pipeline after remat and regather (so the forward pass's gathers and
// the backward pass's re-gathers are combined each among their own, and regather still sees
// one all-gather per weight) and before fusion (which sees the copies around a combined
// gather) and async_collectives (so a combined gather becomes one start/done pair). The
// latency-hiding scheduler treats a reshape of a parameter as a parameter, so the
// concatenation of weights moves up with the combined gather's start as a single weight's
// convert does. KILN_COMBINE_THRESHOLD_KB=0 turns it off.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class AllGatherCombinerPass : public Pass {
 public:
  std::string_view name() const override { return "all_gather_combiner"; }
  Result<bool> run(ir::Module& module) override;

  // All-gathers the last run removed by merging (n merged into one removes n - 1).
  int64_t removed() const { return removed_; }

 private:
  int64_t removed_ = 0;
};

}  // namespace kiln::passes
