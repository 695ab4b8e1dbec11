// The forward-only evaluation program: the model's loss on a batch, with no gradients and
// no optimizer, so an eval batch costs a forward pass and changes no state.
//
//   inputs:  params[n] (weight_dtype), then batch inputs, targets, positions, segmentation
//            (s32 [B, T] each)
//   outputs: xent_sum, total_weights (f32 []): eval loss = sum xent_sum / sum total_weights
//            over the eval batches (token-averaged, padding excluded), perplexity = exp(loss)
//
// EvalRunner runs it on the trainer's executor kind (compiled CPU executable or reference
// interpreter) with the parameters the trainer hands it before each evaluation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/ir/literal.h"
#include "kiln/models/model.h"

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
  // compiled = true: compiles the program with the CPU backend (falls back to the
  // interpreter when that fails, as the trainer does, saying why in fallback_reason()).
  static Result<std::unique_ptr<EvalRunner>> create(EvalProgram program, bool compiled,
                                                    const backend::CompileOptions& options);
  void set_param(int64_t i, const ir::Literal& value);
  // One batch (inputs, targets, positions, segmentation as s32 [B, T] literals).
  Result<EvalSums> run(const std::vector<ir::Literal>& batch);
  const char* name() const { return exe_ ? "compiled CPU executable" : "reference interpreter"; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  double compile_seconds() const { return compile_s_; }

 private:
  EvalRunner() = default;
  EvalProgram program_;
  std::unique_ptr<backend::Executable> exe_;  // null: the interpreter
  std::vector<ir::Literal> literal_args_;
  std::vector<backend::Buffer> buffer_args_;
  std::string fallback_reason_;
  double compile_s_ = 0;
};

}  // namespace kiln::train
