// Runs the step program step after step and holds the training state between steps, in
// the value type of its executor:
//   interpreter  the reference interpreter on ir::Literal (slow, exact: the oracle)
//   compiled     the CPU backend's Executable on backend::Buffer (fused generated kernels,
//                oneDNN GEMMs), compiled once
// Arguments follow StepProgram's layout; after run() the state outputs (params, mu, nu,
// step) replace the state arguments, and the metric outputs can be read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/ir/literal.h"
#include "kiln/train/step_program.h"

namespace kiln::train {

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual void set_arg(int64_t index, const ir::Literal& value) = 0;
  virtual Status run() = 0;
  virtual double metric(StepMetric m) const = 0;  // from the last run()
  // Per MoE layer {max, mean, dropped} from the last run() (empty without MoE layers).
  const std::vector<double>& expert_load() const { return expert_load_; }
  virtual ir::Literal arg(int64_t index) const = 0;  // the current value of an argument (state)
  virtual const char* name() const = 0;              // "reference interpreter", "compiled CPU executable"
  // Per-instruction timing hook (profiles); only executors that run kernels call it.
  virtual void set_observer(backend::InstructionObserver* /*observer*/) {}
  // Seconds the last run() spent blocked on collectives (the most of any local device);
  // -1 for runners without collectives (one device), whose metrics leave it out.
  virtual double collective_wait_s() const { return -1; }

 protected:
  std::vector<double> expert_load_;
};

std::unique_ptr<StepRunner> make_interpreter_runner(const StepProgram& program);
// Compiles the program (options: dump_dir, verify_each; the kernel cache makes a second
// compile of the same program cheap).
Result<std::unique_ptr<StepRunner>> make_compiled_runner(const StepProgram& program,
                                                         const backend::CompileOptions& options,
                                                         backend::CompileReport* report);

}  // namespace kiln::train
