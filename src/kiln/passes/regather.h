// RegatherPass ("regather"): the backward pass gathers FSDP weights again instead of
// keeping the forward pass's gathered copy alive, as XLA does for MaxText (the all-gather
// sits inside each layer's jax.checkpoint, so it is recomputed with the layer).
//
// The partitioner emits one all_gather per use of a sharded weight; CSE merges the forward
// and backward ones into one, so without this pass every layer's gathered weights live from
// the forward pass to the backward pass: on the 3.5 B reference config that is most of the
// per-device arena. An all_gather of a value computed from entry parameters alone (a
// weight, possibly through elementwise ops such as a convert, reshape, transpose, broadcast
// or slice; nothing computed by a matmul or from gradients) that has both forward and
// backward users gets a clone ("<name>.regather")
// for its backward users; topological order puts the clone just before its first backward
// use, so the forward copy dies at its last forward use. Costs one more all_gather per
// weight per step, the traffic XLA also pays.
//
// Backward code: gradient values (names ending in ".grad"), the remat pass's recomputed
// forward values (".remat"), and everything computed from them.
//
// Place: after CSE (which would merge the clones back) and after remat (whose recomputed
// layers read the gathered weights in the backward pass); the executable runs it when a
// remat policy is on (remat_policy=none keeps everything from the forward pass, gathered
// weights included, trading memory for speed). KILN_REGATHER=0 turns the pass off, to
// measure what it saves.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class RegatherPass : public Pass {
 public:
  std::string_view name() const override { return "regather"; }
  Result<bool> run(ir::Module& module) override;

  // All-gathers cloned by the last run, and the bytes their forward copies no longer hold
  // through the backward pass.
  int64_t regathered() const { return regathered_; }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t regathered_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace kiln::passes
