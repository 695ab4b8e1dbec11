// Structural verification of a module: SSA order, user lists, roots, parameters, metadata
// that fits the shapes. Op semantics (shapes, attributes, operand counts) are verified by
// ops::verify, which calls this first. Errors print the offending instruction.
#pragma once

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"

namespace kiln::ir {

Status verify_structure(const Module& module);

}  // namespace kiln::ir
