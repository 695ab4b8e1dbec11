#include "kiln/train/step_program.h"

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/optim/clip.h"
#include "kiln/train/weight_copies.h"

namespace kiln::train {

using frontend::DType;
using frontend::Graph;
using frontend::Tensor;

const char* step_metric_name(StepMetric metric) {
  switch (metric) {
    case StepMetric::kLoss: return "loss";
    case StepMetric::kXentSum: return "xent_sum";
    case StepMetric::kTotalWeights: return "total_weights";
    case StepMetric::kMoeLbLoss: return "moe_lb_loss";
    case StepMetric::kZLoss: return "z_loss";
    case StepMetric::kRawGradNorm: return "raw_grad_norm";
    case StepMetric::kGradNorm: return "grad_norm";
    case StepMetric::kParamNorm: return "param_norm";
    case StepMetric::kLearningRate: return "learning_rate";
    case StepMetric::kCount: break;
  }
  return "?";
}

Result<StepProgramOptions> StepProgramOptions::from_config(const config::Config& config) {
  StepProgramOptions o;
  KILN_ASSIGN_OR_RETURN(o.adamw, optim::AdamWOptions::from_config(config));
  KILN_ASSIGN_OR_RETURN(o.schedule, optim::ScheduleOptions::from_config(config));
  o.clip_threshold = config.get_float("gradient_clipping_threshold");
  o.batch = config.derived().micro_batch_size;
  o.seq_len = config.get_int("max_target_length");
  o.weight_copies = config.get_bool("bf16_weight_copy") && config.get_string("dtype") == "bfloat16" &&
                    config.get_string("weight_dtype") == "float32";
  return o;
}

namespace {

// A scalar output of the model as f32 [] (a missing optional term is 0).
Result<Tensor> scalar_f32(Graph& g, const Tensor& t, const char* what) {
  if (!t.valid()) return g.scalar(0.0);
  if (t.rank() != 0 || !ir::is_floating(t.dtype())) {
    return invalid_argument("the model's {} must be a floating-point scalar, got {}", what, t.shape().to_string());
  }
  return t.astype(DType::kF32);
}

}  // namespace

Result<StepProgram> build_step_program(const models::Model& model, const StepProgramOptions& options) {
  const std::vector<models::ParamSpec>& specs = model.params();
  if (specs.empty()) return invalid_argument("the model has no parameters to train");
  StepProgram program;
  program.num_params = static_cast<int64_t>(specs.size());

  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  KILN_ASSIGN_OR_RETURN(program.decay, optim::weight_decay_mask(names, options.adamw.mask));

  Graph g("train_step");
  // Parameters are numbered in creation order: params, mu, nu, step, batch (StepProgram's layout).
  std::vector<Tensor> params, mu, nu;
  for (const auto& s : specs) params.push_back(g.parameter(s.name, s.shape, s.axes));
  for (const auto& s : specs) {
    mu.push_back(g.parameter("opt_state.mu." + s.name, s.shape.with_dtype(options.adamw.mu_dtype), s.axes));
  }
  for (const auto& s : specs) nu.push_back(g.parameter("opt_state.nu." + s.name, s.shape, s.axes));
  Tensor step = g.parameter("step", frontend::s32({}));
  const std::vector<std::string> batch_axes = {"activation_embed_and_logits_batch", "activation_length"};
  auto batch_shape = frontend::s32({options.batch, options.seq_len});
  models::Batch batch;
  batch.inputs = g.parameter("batch.inputs", batch_shape, batch_axes);
  batch.targets = g.parameter("batch.targets", batch_shape, batch_axes);
  batch.positions = g.parameter("batch.positions", batch_shape, batch_axes);
  batch.segmentation = g.parameter("batch.segmentation", batch_shape, batch_axes);

  // Forward: the model's loss.
  models::LossOutputs losses = model.loss(g, params, batch);
  if (!losses.loss.valid() || losses.loss.rank() != 0 || losses.loss.dtype() != DType::kF32) {
    return invalid_argument("the model's loss must be an f32 scalar, got {}",
                            losses.loss.valid() ? losses.loss.shape().to_string() : "nothing");
  }

  // Backward: d loss / d params, appended to the same computation.
  std::vector<ir::Instr*> wrt;
  for (const Tensor& p : params) wrt.push_back(p.instr());
  KILN_ASSIGN_OR_RETURN(std::vector<ir::Instr*> grad_instrs,
                        autodiff::gradients(g.computation(), losses.loss.instr(), wrt));
  std::vector<Tensor> grads;
  for (ir::Instr* gi : grad_instrs) grads.push_back(Tensor(&g, gi));
  // The forward and backward read each weight's bf16 copy instead of casting it (after
  // autodiff: the casts' adjoints already carry the gradients to the f32 parameters).
  const int64_t copies_begin = static_cast<int64_t>(g.parameters().size());
  std::vector<WeightCopy> copies;
  if (options.weight_copies) copies = attach_weight_copies(g, params);
  for (const WeightCopy& c : copies) program.weight_copy_of.push_back(c.param);

  // Optimizer: clip, schedule, AdamW.
  optim::Clipped clipped = optim::clip_by_global_norm(grads, options.clip_threshold);
  Tensor lr = optim::learning_rate(options.schedule, step);
  optim::AdamWResult update = optim::adamw_update(options.adamw, params, clipped.grads, mu, nu, step, lr, program.decay);
  Tensor param_norm;
  {
    auto scope = g.scope("metrics");
    param_norm = optim::global_norm(update.params).named("param_norm");
  }

  std::vector<Tensor> outputs;
  outputs.insert(outputs.end(), update.params.begin(), update.params.end());
  outputs.insert(outputs.end(), update.mu.begin(), update.mu.end());
  outputs.insert(outputs.end(), update.nu.begin(), update.nu.end());
  outputs.push_back((step + 1.0).named("next_step"));
  for (const WeightCopy& c : copies) {
    auto scope = g.scope("adamw");
    outputs.push_back(update.params[c.param].astype(DType::kBF16).named("bf16_copy"));
  }
  // Metrics, in StepMetric order.
  KILN_ASSIGN_OR_RETURN(Tensor xent, scalar_f32(g, losses.xent_sum, "xent_sum"));
  KILN_ASSIGN_OR_RETURN(Tensor weights, scalar_f32(g, losses.total_weights, "total_weights"));
  KILN_ASSIGN_OR_RETURN(Tensor lb, scalar_f32(g, losses.moe_lb_loss, "moe_lb_loss"));
  KILN_ASSIGN_OR_RETURN(Tensor z, scalar_f32(g, losses.z_loss, "z_loss"));
  outputs.push_back(losses.loss);
  outputs.push_back(xent);
  outputs.push_back(weights);
  outputs.push_back(lb);
  outputs.push_back(z);
  outputs.push_back(clipped.raw_norm);
  outputs.push_back(clipped.norm);
  outputs.push_back(param_norm);
  outputs.push_back(lr);
  if (losses.expert_load.valid()) {
    outputs.push_back(frontend::stop_gradient(losses.expert_load.astype(DType::kF32)));
    program.has_expert_load = true;
  }
  KILN_CHECK(static_cast<int64_t>(outputs.size()) == program.num_outputs());
  g.set_outputs(outputs);
  program.module = g.release();
  // The copies were traced last; as state they sit after the step counter (StepProgram's layout).
  if (!copies.empty()) program.module = move_params(std::move(program.module), program.copy_arg(0), copies_begin);
  return program;
}

std::unique_ptr<ir::Module> build_init_program(const std::vector<models::ParamSpec>& params, int64_t seed) {
  Graph g("init_params");
  std::vector<Tensor> outputs;
  for (const auto& spec : params) {
    auto scope = g.scope(spec.name);
    outputs.push_back(models::initial_value(g, spec, seed).named("init"));
  }
  g.set_outputs(outputs);
  return g.release();
}

}  // namespace kiln::train
