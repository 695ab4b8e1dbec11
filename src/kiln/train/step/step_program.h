// The training step as ONE module, the unit every later stage (SPMD partitioning, fusion,
// buffer assignment, the compiled backend) works on, as MaxText's jit(train_step):
//
//   inputs:  params[n] (weight_dtype), mu[n] (mu_dtype), nu[n], step (s32 []: optax's count),
//            copies[c] (bf16 copies of the weights the model casts to bf16; bf16_weight_copy,
//            train/step/weight_copies.h; none in f32 runs), batch inputs, targets, positions,
//            segmentation (s32 [B, T] each)
//   body:    model loss -> autodiff::gradients -> clip_by_global_norm -> schedule -> AdamW,
//            then the parameters the model sets (LossOutputs::state_updates: e.g. DeepSeek-V3's
//            router bias, moved by that step's expert loads) replace their AdamW update with
//            the model's value and keep their mu/nu (the model stops their gradient, so they
//            take no part in clipping, Adam or weight decay); with micro-batches, the last
//            micro-batch's value
//            with skip_step_on_spikes, one more input after the batch, spike_limits (f32 [2]:
//            the loss and raw gradient norm a step may reach, train/spike_window.h): a step
//            above either keeps params, mu and nu as they were (the step counter advances)
//   outputs: params'[n], mu'[n], nu'[n], step + 1, copies'[c], then the metrics in StepMetric order
//
// The state outputs have the shapes of the state inputs, so a runtime can alias them
// (donate the state); the trainer feeds outputs 0 .. 3n + c back as the next step's inputs.
// The init program is a separate module with no inputs whose outputs are the initial
// parameters (the ParamSpec initialisers as Graph::random draws seeded by init_weights_seed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/ir/instr.h"
#include "kiln/models/model.h"
#include "kiln/optim/adamw.h"
#include "kiln/optim/schedule.h"

namespace kiln::train {

// The step's scalar metric outputs (f32 []), in output order.
enum class StepMetric {
  kLoss,          // what is differentiated: xent_sum / total_weights + auxiliary terms
  kXentSum,       // summed token cross-entropy (lm_loss = xent_sum / total_weights)
  kTotalWeights,  // counted target tokens
  kMoeLbLoss,     // weighted load-balance loss (0 when unused)
  kZLoss,         // weighted output z-loss (0 when unused)
  kRawGradNorm,   // global gradient norm before clipping (MaxText learning/raw_grad_norm)
  kGradNorm,      // after clipping (MaxText learning/grad_norm)
  kParamNorm,     // global norm of the updated parameters (MaxText learning/param_norm)
  kLearningRate,  // lr(step) (MaxText learning/current_learning_rate)
  kCount
};
const char* step_metric_name(StepMetric metric);  // "loss", "xent_sum", ...

struct StepProgramOptions {
  optim::AdamWOptions adamw;
  optim::ScheduleOptions schedule;
  double clip_threshold = 1.0;  // gradient_clipping_threshold (0 = off)
  int64_t batch = 1;            // sequences per micro-batch (per-device × devices)
  // gradient_accumulation_steps: micro-batches per optimizer step, all inside the one step
  // program. With more than one, the batch arguments are [accumulation, batch, seq_len]
  // (micro-batch m is rows m·batch .. (m+1)·batch - 1 of the global batch), each
  // micro-batch is differentiated on its own and the gradients are summed, the loss
  // normalised over all micro-batches' target tokens (MaxText's semantics).
  int64_t accumulation = 1;
  int64_t seq_len = 1;          // max_target_length
  // bf16_weight_copy with dtype=bfloat16 and weight_dtype=float32: the bf16 copy of every
  // weight the model casts to bf16 is step state written by AdamW (train/step/weight_copies.h).
  bool weight_copies = false;
  // skip_step_on_spikes: the spike_limits argument and the update kept or dropped by it.
  bool skip_on_spikes = false;

  static Result<StepProgramOptions> from_config(const config::Config& config);
};

struct StepProgram {
  std::unique_ptr<ir::Module> module;
  int64_t num_params = 0;
  std::vector<bool> decay;  // per parameter: weight decay applies (adamw_mask)

  // Argument positions.
  int64_t param_arg(int64_t i) const { return i; }
  int64_t mu_arg(int64_t i) const { return num_params + i; }
  int64_t nu_arg(int64_t i) const { return 2 * num_params + i; }
  int64_t step_arg() const { return 3 * num_params; }
  // Weight copy k is the bf16 copy of parameter weight_copy_of[k] (derived state: not
  // checkpointed; refresh_weight_copies makes it from the parameter).
  std::vector<int64_t> weight_copy_of;
  int64_t num_copies() const { return static_cast<int64_t>(weight_copy_of.size()); }
  int64_t copy_arg(int64_t k) const { return 3 * num_params + 1 + k; }
  int64_t batch_arg(int field) const {  // inputs, targets, positions, segmentation
    return 3 * num_params + 1 + num_copies() + field;
  }
  // skip_step_on_spikes: f32 [2] = {loss limit, raw gradient norm limit} (+inf: no limit).
  bool has_spike_limits = false;
  int64_t spike_limits_arg() const { return 3 * num_params + 5 + num_copies(); }
  int64_t num_args() const { return 3 * num_params + 5 + num_copies() + (has_spike_limits ? 1 : 0); }
  // Output positions: state outputs mirror the state arguments; the metrics follow.
  int64_t num_state() const { return 3 * num_params + 1 + num_copies(); }
  int64_t metric_output(StepMetric m) const { return num_state() + static_cast<int64_t>(m); }
  // MoE models: one more output after the metrics, f32 [MoE layers, 3] (max and mean
  // (token, expert) pairs per expert, dropped pairs; models::LossOutputs::expert_load).
  bool has_expert_load = false;
  int64_t expert_load_output() const { return metric_output(StepMetric::kCount); }
  int64_t num_outputs() const { return metric_output(StepMetric::kCount) + (has_expert_load ? 1 : 0); }
};

Result<StepProgram> build_step_program(const models::Model& model, const StepProgramOptions& options);

// Outputs: the initial value of each of `params`, in order, in its dtype, traced with
// models::initial_value (MaxText's initialisers) from `seed` (init_weights_seed).
std::unique_ptr<ir::Module> build_init_program(const std::vector<models::ParamSpec>& params, int64_t seed);

}  // namespace kiln::train
