// A checkpoint's model as a compiled forward-only program, for `kiln forward` and
// `kiln sample`:
//
//   inputs:  params[n] (the checkpoint's parameters, in model.params() order),
//            inputs, targets, positions, segmentation (s32 [B, T] each)
//   outputs: logits f32 [B, T, V], per-token loss f32 [B, T] (-log p(target): the model's
//            cross-entropy before any weighting or auxiliary term)
//
// and, compiled on the first gradients() call, the training step's gradient (for parity
// checks of the backward pass against other implementations):
//
//   inputs:  the same
//   outputs: the training loss and its terms (f32 []: loss, xent_sum, total_weights,
//            moe_lb_loss, z_loss; StepMetric's meanings), then d loss / d params[n]
//
// built as train/step/step_program.cc builds it (model loss -> autodiff::gradients), without the
// clipping and the optimizer update that follow there.
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

struct GradientOutputs {
  // The differentiated loss, xent_sum / max(total_weights, 1) + moe_lb_loss + z_loss, with
  // the config's load_balance_loss_weight and z_loss_multiplier.
  double loss = 0, xent_sum = 0, total_weights = 0, moe_lb_loss = 0, z_loss = 0;
  std::vector<ir::Literal> grads;  // d loss / d param, one per model().params() entry, in its dtype
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

  // The training step's gradient on this batch: targets count where segmentation is not 0
  // (as in training). The gradient program is compiled on the first call.
  Result<GradientOutputs> gradients(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                                    const std::vector<int32_t>& positions,
                                    const std::vector<int32_t>& segmentation);

 private:
  Result<std::vector<backend::Buffer>> arguments(const std::vector<int32_t>& inputs,
                                                 const std::vector<int32_t>& targets,
                                                 const std::vector<int32_t>& positions,
                                                 const std::vector<int32_t>& segmentation) const;
  Status compile_gradients();

  std::unique_ptr<config::Config> config_;
  std::unique_ptr<models::Model> model_;
  const backend::Backend* backend_ = nullptr;  // what compiles the programs (the config's `backend`)
  std::unique_ptr<ir::Module> module_;
  std::unique_ptr<backend::Executable> exe_;
  std::unique_ptr<ir::Module> grad_module_;
  std::unique_ptr<backend::Executable> grad_exe_;
  std::vector<backend::Buffer> params_;
  std::string step_dir_;
  int64_t step_ = 0, batch_ = 0, seq_len_ = 0, vocab_ = 0;
};

}  // namespace kiln::app
