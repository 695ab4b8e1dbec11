// The pass contract. A pass rewrites a module in place and says whether it changed anything;
// it never fails on a module that verifies (a failure is a bug in the pass or an input it
// cannot handle, reported as a Status that names the instruction).
//
// Program order: a pass may append new instructions at the end of a computation even when
// earlier instructions use them; Pipeline restores topological order (Computation::topo_sort,
// stable and linear) after every pass that reports a change, before verifying. The passes in
// this directory also sort what they touch themselves, so they can run standalone (tests,
// tools) and still leave a module that prints and verifies.
#pragma once

#include <string_view>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"

namespace kiln::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  // The file stem of the pass ("dce", "simplify"): used in --passes=, logs and dump names.
  virtual std::string_view name() const = 0;
  // Rewrites `module`; true when anything changed.
  virtual Result<bool> run(ir::Module& module) = 0;
};

}  // namespace kiln::passes
