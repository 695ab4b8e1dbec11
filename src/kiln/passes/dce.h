// Dead-code elimination: removes every instruction whose value neither the root nor any
// live instruction uses (parameters stay, as they are the computation's signature; no op in
// the set has side effects, so unused means dead), then every non-entry computation that no
// remaining instruction calls.
#pragma once

#include <vector>

#include "kiln/passes/pass.h"

namespace kiln::passes {

class DcePass : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  Result<bool> run(ir::Module& module) override;
};

// Removes the dead instructions of one computation; returns how many it removed.
int64_t remove_dead_instructions(ir::Computation& computation);

// Removes those of `candidates` that are unused (no users, not the root, not a parameter),
// and then, transitively, operands that became unused through those removals. Passes call it
// on the instructions they replaced, to clean up after themselves without touching dead code
// that was there before. Returns how many it removed.
int64_t remove_if_dead(ir::Computation& computation, const std::vector<ir::Instr*>& candidates);

}  // namespace kiln::passes
