// Parses IR text (printer.h) back into a Module. Errors name the line and column:
//   "line 4, column 17: unknown operand %x.9"
// The parser checks syntax and that names resolve; shapes and attributes are checked
// against the op registry by ops::verify.
#pragma once

#include <memory>
#include <string_view>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"

namespace kiln::ir {

Result<std::unique_ptr<Module>> parse_module(std::string_view text);

// Parses "f32[2,3]" or "(f32[2], s32[2])".
Result<Shape> parse_shape(std::string_view text);

}  // namespace kiln::ir
