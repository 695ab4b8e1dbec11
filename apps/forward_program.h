// A checkpoint's model as a compiled forward-only program, for `kiln forward` and
// `kiln sample`:
//
//   inputs:  params[n] (the checkpoint's parameters, in model.params() order),
//            inputs, targets, positions, segmentation (s32 [B, T] each)
//   outputs: logits f32 [B, T, V], per-token loss f32 [B, T] (-log p(target): the model's
//            cross-entropy before any weighting or auxiliary term)
//
// The model is rebuilt from the resolved config saved in the checkpoint (plus key=value
// overrides), so a checkpoint carries everything needed to run it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/ir/literal.h"
#include "kiln/models/model.h"

namespace kiln::app {

struct ForwardOutputs {
  ir::Literal logits;  // f32 [B, T, V]
  ir::Literal loss;    // f32 [B, T]
};

class ForwardProgram {
 public:
  // Loads the checkpoint (a step directory, or a checkpoints directory: its latest) and
  // compiles the forward pass for `batch` sequences of `seq_len` tokens (batch 0: only the
  // config and the model, nothing read or compiled; run() is then an error).
  static Result<std::unique_ptr<ForwardProgram>> load(const std::string& checkpoint_dir,
                                                      const std::vector<std::string>& overrides, int64_t batch,
                                                      int64_t seq_len);

  const config::Config& config() const { return *config_; }
  const models::Model& model() const { return *model_; }
  const std::string& step_dir() const { return step_dir_; }
  int64_t step() const { return step_; }
  int64_t vocab_size() const { return vocab_; }

  // All four are s32 [B, T] values, row-major. Ids must be < vocab_size().
  Result<ForwardOutputs> run(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                             const std::vector<int32_t>& positions, const std::vector<int32_t>& segmentation);

 private:
  std::unique_ptr<config::Config> config_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<ir::Module> module_;
  std::unique_ptr<backend::Executable> exe_;
  std::vector<backend::Buffer> params_;
  std::string step_dir_;
  int64_t step_ = 0, batch_ = 0, seq_len_ = 0, vocab_ = 0;
};

}  // namespace kiln::app
