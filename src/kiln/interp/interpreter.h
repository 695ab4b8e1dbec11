// The reference interpreter: runs any module on host literals, one instruction at a time,
// with each op's reference evaluation from the registry (double arithmetic, rounded to the
// result dtype after every op). Slow, simple and exact: the oracle every optimization,
// backend and model is tested against.
#pragma once

#include <span>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"
#include "kiln/ir/literal.h"

namespace kiln::interp {

// Evaluates `computation` with `args` bound to its parameters (by index). Returns the root's
// value (a tuple literal for a tuple root). Argument shapes are checked (a mismatch is bad
// input, not a crash).
Result<ir::Literal> evaluate(const ir::Computation& computation, std::span<const ir::Literal> args);

// Evaluates the module's entry computation; a tuple root is returned as its elements.
Result<std::vector<ir::Literal>> run(const ir::Module& module, std::span<const ir::Literal> args);

}  // namespace kiln::interp
