// The interpreter with a per-instruction hook: what profiles and traces of
// backend=interpreter are built from (the compiled executable has
// backend::InstructionObserver; the interpreter sits below the backend, so it has its own).
// A separate header so the many users of interpreter.h do not see <functional>.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"
#include "kiln/ir/literal.h"

namespace kiln::interp {

// Called after each instruction of the entry computation that the interpreter evaluated
// (not parameters or constants, nor the instructions of called computations), with its
// steady_clock interval in nanoseconds, on the evaluating thread.
using InstructionHook = std::function<void(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns)>;

// interp::run with the hook (a null hook times nothing).
Result<std::vector<ir::Literal>> run_with_hook(const ir::Module& module, std::span<const ir::Literal> args,
                                               const InstructionHook& hook);

}  // namespace kiln::interp
