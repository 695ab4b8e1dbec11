// AllReduceCombinerPass ("all_reduce_combiner"): independent small all-reduces over the same
// devices become one, as XLA's all-reduce combiner does. Every all-reduce is a point where
// all devices of its group meet; the partitioned training step has hundreds of scalar ones
// (each gradient's share of the global norm, the loss and metric sums), and on a machine
// whose devices share cores each meeting costs a wait for the slowest device, however few
// bytes move.
//
// Candidates: all-reduces whose operand has at most kMaxCombinedBytes bytes. Two can merge
// when they have the same dtype and group (mesh_axes, group_size) and neither depends on the
// other: candidates are grouped by the number of all-reduces on the longest path that reaches
// them (an all-reduce that depends on another has a larger count), so each group is
// independent. A group of n >= 2 becomes
//     reshape each operand to [k_i] -> concatenate -> all_reduce -> slice [o_i, o_i + k_i)
//     -> reshape back
// and the users read the slices. The sums are the same numbers added in the same rank order
// (the runtime adds element by element), so results are bit for bit those of the separate
// all-reduces.
//
// Place: on the partitioned program, after its cleanup (CSE first merges duplicates).
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class AllReduceCombinerPass : public Pass {
 public:
  static constexpr int64_t kMaxCombinedBytes = 64 * 1024;  // per candidate operand

  std::string_view name() const override { return "all_reduce_combiner"; }
  Result<bool> run(ir::Module& module) override;

  // All-reduces the last run removed by merging (n merged into one removes n - 1).
  int64_t removed() const { return removed_; }

 private:
  int64_t removed_ = 0;
};

}  // namespace kiln::passes
