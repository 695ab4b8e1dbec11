// Common-subexpression elimination: within each computation, merges instructions that
// compute the same value — same opcode, operands, attributes, shape, called computations and
// (for constants) equal literal values — into the first occurrence, which keeps its metadata.
// Names, source locations and logical axes do not block a merge; shardings do (two values
// the partitioner must lay out differently stay apart). Every op is pure, and rng is
// counter-based, so two rngs with the same seed, distribution and shape are one value.
// Parameters are never merged (each is a distinct input).
//
// Operands compare by identity, so merging runs in program order: by the time an
// instruction is looked up, its operands have already been replaced by their first
// occurrences, and chains of duplicates collapse in one run. Commutative operand orders
// (add(a,b) vs add(b,a)) are not canonicalized yet.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class CsePass : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  Result<bool> run(ir::Module& module) override;
};

}  // namespace kiln::passes
