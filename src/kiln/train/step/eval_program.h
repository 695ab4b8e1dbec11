// The forward-only evaluation program: the model's loss on a batch, with no gradients and
// no optimizer, so an eval batch costs a forward pass and changes no state.
//
//   inputs:  params[n] (weight_dtype), then batch inputs, targets, positions, segmentation
//            (s32 [B, T] each)
//   outputs: xent_sum, total_weights (f32 []): eval loss = sum xent_sum / sum total_weights
//            over the eval batches (token-averaged, padding excluded), perplexity = exp(loss)
//
// EvalRunner runs it on the step runner's devices, partitioned like the step: each device
// reads its own shards of the current parameters where the step keeps them (no copy, no
// global value) and its rows of the batch, and the program all-reduces the two sums.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/literal.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/step/step_runner.h"

namespace kiln::train {

struct EvalProgram {
  std::unique_ptr<ir::Module> module;
  int64_t num_params = 0;
  int64_t batch_arg(int field) const { return num_params + field; }  // inputs, targets, positions, segmentation
  int64_t num_args() const { return num_params + 4; }
};

Result<EvalProgram> build_eval_program(const models::Model& model, int64_t batch, int64_t seq_len);

struct EvalSums {
  double xent_sum = 0, total_weights = 0;
};

class EvalRunner {
 public:
  // One executable of `backend` per local device (the interpreter backend: the reference
  // interpreter on literals; a backend that falls back does so when it cannot compile, as the
  // trainer does, saying why in fallback_reason()).
  // `runner` holds the state laid out as `step` says; the eval reads its parameters.
  static Result<std::unique_ptr<EvalRunner>> create(EvalProgram program, const StepRunner& runner,
                                                    const StepProgram& step, const config::Config& config,
                                                    const backend::Backend& backend,
                                                    const backend::CompileOptions& options);
  // One global batch (inputs, targets, positions, segmentation as s32 [B, T] literals), with
  // the runner's current parameters. Collective under MPI: every rank calls it together.
  Result<EvalSums> run(StepRunner& runner, const std::vector<ir::Literal>& batch);
  const char* name() const { return executables_.empty() ? "reference interpreter" : name_.c_str(); }
  const std::string& fallback_reason() const { return fallback_reason_; }
  double compile_seconds() const { return compile_s_; }
  const ir::Module& local_module() const { return *local_; }  // the program as each device runs it

 private:
  EvalRunner() = default;
  EvalProgram program_;                 // the global program
  std::string name_;                    // the backend's description
  std::unique_ptr<ir::Module> local_;   // as each device runs it (the global one on one device)
  const StepProgram* step_ = nullptr;
  std::vector<ir::Sharding> batch_shardings_;  // of the 4 batch fields (empty on one device)
  config::Mesh mesh_;
  int64_t first_device_ = 0;
  std::vector<std::unique_ptr<backend::Executable>> executables_;  // one per local device; empty: interpreter
  std::string fallback_reason_;
  double compile_s_ = 0;
};

}  // namespace kiln::train
