// Reverse-mode automatic differentiation over the IR. The gradient instructions are added
// to the same computation as the forward pass, so forward, backward and the optimizer
// update form one program that later passes optimize together.
#pragma once

#include <span>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"

namespace kiln::autodiff {

// Appends instructions computing d(loss)/d(wrt[i]) for each i and returns them (zeros for a
// value the loss does not depend on). `loss` must be a floating-point scalar of
// `computation`; each wrt must be a floating-point array of it. Each op's gradient comes
// from its registry rule; tuples are routed here. New instructions are named after the
// forward value they differentiate ("<name>.grad").
Result<std::vector<ir::Instr*>> gradients(ir::Computation& computation, ir::Instr* loss,
                                          std::span<ir::Instr* const> wrt);

}  // namespace kiln::autodiff
