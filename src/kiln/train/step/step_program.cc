#include "kiln/train/step/step_program.h"

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/optim/clip.h"
#include "kiln/train/step/weight_copies.h"

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
  o.accumulation = config.get_int("gradient_accumulation_steps");
  if (o.accumulation < 1) {
    return invalid_argument("gradient_accumulation_steps={}: expected a positive number of micro-batches",
                            o.accumulation);
  }
  o.seq_len = config.get_int("max_target_length");
  o.weight_copies = config.get_bool("bf16_weight_copy") && config.get_string("dtype") == "bfloat16" &&
                    config.get_string("weight_dtype") == "float32";
  o.skip_on_spikes = config.get_bool("skip_step_on_spikes");
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

Status check_loss(const models::LossOutputs& losses) {
  if (!losses.loss.valid() || losses.loss.rank() != 0 || losses.loss.dtype() != DType::kF32) {
    return invalid_argument("the model's loss must be an f32 scalar, got {}",
                            losses.loss.valid() ? losses.loss.shape().to_string() : "nothing");
  }
  return ok_status();
}

// gradient_accumulation_steps > 1: the micro-batches' forward and backward passes, one after
// the other in the one program. Micro-batch m's objective is its share of the step's loss,
//   xent_m / W + z_m · max(W_m, 1) / W + lb_m / k      (W = max(Σ W_m, 1), W_m its target tokens)
// so the summed objectives are the loss of the whole global batch with every target token
// weighted equally (MaxText's normalisation); the load-balance loss, a function of each
// micro-batch's routing, is their mean. Each objective is differentiated on its own: its
// backward pass needs only its own forward pass's activations (and W, from the batch's
// segment ids), and each micro-batch's instructions carry their own scheduling stage, so
// the scheduler finishes one micro-batch and frees its activations before the next starts. Metrics: loss, xent_sum, total_weights and z_loss of the global batch,
// moe_lb_loss and expert_load averaged over the micro-batches.
Result<models::LossOutputs> accumulate_micro_batches(Graph& g, const models::Model& model,
                                                     const std::vector<Tensor>& params, const models::Batch& batch,
                                                     const StepProgramOptions& options,
                                                     const std::vector<ir::Instr*>& wrt, std::vector<Tensor>* grads) {
  const int64_t k = options.accumulation;
  auto micro = [&](const Tensor& field, int64_t m) {
    return field.slice(0, m, m + 1).reshape({options.batch, options.seq_len});
  };
  // Every instruction made for micro-batch m (its forward pass, its backward pass, its
  // gradients' sum) gets scheduling stage m + 1, so the scheduler runs one micro-batch to
  // the end before the next starts.
  ir::Computation& comp = g.computation();
  auto mark_stage = [&](size_t from, int64_t m) {
    const auto& instrs = comp.instructions();
    for (size_t i = from; i < instrs.size(); ++i) instrs[i]->mutable_meta().stage = static_cast<int32_t>(m + 1);
  };
  std::vector<models::LossOutputs> parts;
  Tensor all_weights;
  for (int64_t m = 0; m < k; ++m) {
    const size_t first = comp.instructions().size();
    auto scope = g.scope("micro_batch_" + std::to_string(m));
    models::Batch b{micro(batch.inputs, m), micro(batch.targets, m), micro(batch.positions, m),
                    micro(batch.segmentation, m)};
    parts.push_back(model.loss(g, params, b));
    KILN_RETURN_IF_ERROR(check_loss(parts.back()));

    KILN_ASSIGN_OR_RETURN(Tensor w, scalar_f32(g, parts.back().total_weights, "total_weights"));
    mark_stage(first, m);
    all_weights = m == 0 ? w : all_weights + w;  // the metric
  }
  auto scope = g.scope("accumulation");
  // W from the batch alone (segment id 0 is padding, models::Batch), so it is ready before
  // any micro-batch runs and no micro-batch's backward pass waits for a later forward pass.
  const Tensor counted = frontend::not_equal(batch.segmentation,
                                             g.full(batch.segmentation.dims(), 0.0, ir::DType::kS32));
  const Tensor target_tokens = frontend::where(counted, g.full(batch.segmentation.dims(), 1.0), 0.0).sum();
  const Tensor denominator = frontend::stop_gradient(frontend::maximum(target_tokens, 1.0));
  models::LossOutputs out;
  for (int64_t m = 0; m < k; ++m) {
    const size_t first = comp.instructions().size();
    const models::LossOutputs& p = parts[m];
    KILN_ASSIGN_OR_RETURN(Tensor xent, scalar_f32(g, p.xent_sum, "xent_sum"));
    KILN_ASSIGN_OR_RETURN(Tensor w, scalar_f32(g, p.total_weights, "total_weights"));
    KILN_ASSIGN_OR_RETURN(Tensor z, scalar_f32(g, p.z_loss, "z_loss"));
    KILN_ASSIGN_OR_RETURN(Tensor lb, scalar_f32(g, p.moe_lb_loss, "moe_lb_loss"));
    const Tensor z_share = z * frontend::stop_gradient(frontend::maximum(w, 1.0) / denominator);
    const Tensor objective = xent / denominator + z_share + lb / static_cast<double>(k);
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Instr*> grad_instrs,
                          autodiff::gradients(g.computation(), objective.instr(), wrt));
    for (size_t i = 0; i < grad_instrs.size(); ++i) {
      Tensor gi(&g, grad_instrs[i]);
      if (m == 0) {
        grads->push_back(gi);
      } else {
        (*grads)[i] = (*grads)[i] + gi;
      }
    }
    out.loss = m == 0 ? objective : out.loss + objective;
    out.xent_sum = m == 0 ? xent : out.xent_sum + xent;
    out.z_loss = m == 0 ? z_share : out.z_loss + z_share;
    out.moe_lb_loss = m == 0 ? lb : out.moe_lb_loss + lb;
    if (p.expert_load.valid()) out.expert_load = m == 0 ? p.expert_load : out.expert_load + p.expert_load;
    mark_stage(first, m);
  }
  out.total_weights = all_weights;
  // Parameters the model sets take the last micro-batch's value (a model whose value
  // depends on the batch refuses gradient accumulation itself: models/deepseek).
  out.state_updates = parts.back().state_updates;
  out.moe_lb_loss = out.moe_lb_loss / static_cast<double>(k);
  if (out.expert_load.valid()) out.expert_load = out.expert_load / static_cast<double>(k);
  return out;
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
  const int64_t k = options.accumulation;
  std::vector<std::string> batch_axes = {"activation_embed_and_logits_batch", "activation_length"};
  std::vector<int64_t> batch_dims = {options.batch, options.seq_len};
  if (k > 1) {  // micro-batches outermost, never split: each device slices its own rows
    batch_axes.insert(batch_axes.begin(), "accumulation_steps");
    batch_dims.insert(batch_dims.begin(), k);
  }
  auto batch_shape = frontend::s32(batch_dims);
  models::Batch batch;
  batch.inputs = g.parameter("batch.inputs", batch_shape, batch_axes);
  batch.targets = g.parameter("batch.targets", batch_shape, batch_axes);
  batch.positions = g.parameter("batch.positions", batch_shape, batch_axes);
  batch.segmentation = g.parameter("batch.segmentation", batch_shape, batch_axes);
  Tensor spike_limits;
  if (options.skip_on_spikes) spike_limits = g.parameter("spike_limits", frontend::f32({2}));

  std::vector<ir::Instr*> wrt;
  for (const Tensor& p : params) wrt.push_back(p.instr());
  models::LossOutputs losses;
  std::vector<Tensor> grads;
  if (k == 1) {
    // Forward: the model's loss; backward: d loss / d params, appended to the same computation.
    losses = model.loss(g, params, batch);
    KILN_RETURN_IF_ERROR(check_loss(losses));
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Instr*> grad_instrs,
                          autodiff::gradients(g.computation(), losses.loss.instr(), wrt));
    for (ir::Instr* gi : grad_instrs) grads.push_back(Tensor(&g, gi));
  } else {
    KILN_ASSIGN_OR_RETURN(losses, accumulate_micro_batches(g, model, params, batch, options, wrt, &grads));
  }
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
  // Parameters the model sets (LossOutputs::state_updates, e.g. DeepSeek-V3's router bias)
  // take the model's value instead of the optimizer's update, and keep their optimizer state.
  for (const models::LossOutputs::StateUpdate& u : losses.state_updates) {
    if (u.index < 0 || u.index >= program.num_params || !u.value.valid() ||
        u.value.shape() != specs[u.index].shape) {
      return invalid_argument("the model's state update for parameter {} is not a value of its shape {}", u.index,
                              u.index >= 0 && u.index < program.num_params ? specs[u.index].shape.to_string() : "?");
    }
    auto scope = g.scope("state_update");
    update.params[u.index] = u.value;
    update.mu[u.index] = mu[u.index];
    update.nu[u.index] = nu[u.index];
  }
  if (options.skip_on_spikes) {
    // MaxText's skip_step_on_spikes: a step whose loss or raw gradient norm is above its limit
    // (the trainer's rolling mean + factor × std) leaves the state as it was.
    auto scope = g.scope("skip_step_on_spikes");
    Tensor loss = losses.loss.astype(DType::kF32);
    Tensor ok = (loss <= spike_limits.slice(0, 0, 1).reshape({})) &&
                (clipped.raw_norm.astype(DType::kF32) <= spike_limits.slice(0, 1, 2).reshape({}));
    ok = ok.named("step_applied");
    auto keep = [&](std::vector<Tensor>& updated, const std::vector<Tensor>& old) {
      for (size_t i = 0; i < updated.size(); ++i) {
        updated[i] = frontend::where(ok.broadcast_to(updated[i].dims()), updated[i], old[i]);
      }
    };
    keep(update.params, params);
    keep(update.mu, mu);
    keep(update.nu, nu);
    program.has_spike_limits = true;
  }
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
