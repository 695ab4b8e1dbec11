// The initial training state, born sharded: parameters from the init program partitioned
// like the step (each device computes only its own shard of every parameter with the
// counter-based generator keyed by the global element index, ops/rng.h, so every mesh gets
// the one-device values bit for bit), zero moments at their local shapes, step 0. No
// process ever holds a global tensor of the state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/ir/dtype.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/step/step_runner.h"

namespace kiln::train {

struct InitReport {
  double seconds = 0;          // partition + compile + run of the init program
  double compile_seconds = 0;  // of which compiling it
  bool compiled = false;       // run by the CPU backend (else the reference interpreter)
  int64_t state_bytes = 0;     // the state this process's devices hold (params, mu, nu)
  int64_t peak_rss_bytes = 0;  // the process's peak resident memory after the init (VmHWM)
};

Result<InitReport> init_state(StepRunner& runner, const StepProgram& program,
                              const std::vector<models::ParamSpec>& specs, const config::Config& config,
                              ir::DType mu_dtype);

// The process's peak resident set so far (VmHWM of /proc/self/status), 0 where unknown.
int64_t peak_resident_bytes();

}  // namespace kiln::train
