// FusionPass ("fusion"): groups elementwise ops into loop fusions, and reductions with the
// elementwise ops that feed them into input fusions, each outlined into a
// computation that a backend turns into one generated kernel, so intermediate values never
// travel through memory. Runs after gradients are built and after simplification/CSE (so it
// sees the final graph) and before scheduling and buffer assignment.
//
// A group grows from a root elementwise op backwards through producers that are elementwise
// with the root's dims and whose every user is already in the group (fusion never
// duplicates work), plus broadcasts of scalars, which are free to duplicate. Every
// elementwise op ends up in some fusion (alone if nothing joins it). Each decision not to
// fuse logs its reason at KILN_VLOG(2) ("fusion: %a not into %b: used outside the group").
//
// An input fusion's root is a floating-point reduction over one contiguous block of dims;
// its group grows the same way over the reduction's input dims (RMSNorm's sum of squares,
// softmax denominators, gradient norms never materialize their input).
//
// Multi-output fusion (a producer that others also read, merged into its consumer) is a pass
// of its own, run after this one: passes/multi_output_fusion.h. Not yet: reduction
// epilogues, fusing transposes and non-scalar broadcasts (index maps). See docs/backend.md.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class FusionPass : public Pass {
 public:
  // single_ops: every elementwise op becomes its own fusion (for debugging a bad fusion).
  explicit FusionPass(bool single_ops = false) : single_ops_(single_ops) {}
  std::string_view name() const override { return "fusion"; }
  Result<bool> run(ir::Module& module) override;

 private:
  bool single_ops_;
};

}  // namespace kiln::passes
