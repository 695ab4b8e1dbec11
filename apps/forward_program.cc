#include "forward_program.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include <unistd.h>

#include <fmt/format.h>

#include "kiln/autodiff/autodiff.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"

namespace kiln::app {

namespace {

namespace fs = std::filesystem;

// A config saved by an older Kiln, in today's keys: `executor` became `backend` (compiled is
// cpu). Saved configs are Kiln's own YAML dumps, one `key: value` per line.
std::string renamed_keys(const std::string& yaml) {
  static const std::regex kCompiled(R"(^executor: "?compiled"?[ \t]*$)", std::regex::multiline);
  static const std::regex kInterpreter(R"(^executor: "?interpreter"?[ \t]*$)", std::regex::multiline);
  return std::regex_replace(std::regex_replace(yaml, kCompiled, "backend: cpu"), kInterpreter, "backend: interpreter");
}

// The checkpoint's resolved config, read back as a CONFIG.yml: its keys win over the model
// file (override_model_config=true), then the caller's key=value overrides.
Result<config::Config> checkpoint_config(const std::string& yaml, const std::string& step_dir,
                                         const std::vector<std::string>& overrides) {
  if (yaml.empty()) return invalid_argument("checkpoint {} holds no resolved config (manifest.json: config)", step_dir);
  const fs::path tmp = fs::temp_directory_path() / fmt::format("kiln-checkpoint-config-{}.yml", ::getpid());
  {
    std::ofstream out(tmp);
    out << renamed_keys(yaml);
    if (!out.good()) return io_error("writing {}", tmp.string());
  }
  config::LoadOptions options;
  options.config_path = tmp.string();
  options.overrides = {"override_model_config=true"};
  options.overrides.insert(options.overrides.end(), overrides.begin(), overrides.end());
  Result<config::Config> c = config::load(options);
  std::error_code ec;
  fs::remove(tmp, ec);
  if (!c.ok()) return c.status().with_context("the config saved in checkpoint " + step_dir);
  return c;
}

// The program's arguments, as run() and gradients() pass them: the parameters in
// model.params() order, then inputs, targets, positions, segmentation (s32 [B, T] each).
struct TracedInputs {
  std::vector<frontend::Tensor> params;
  models::Batch batch;
};

TracedInputs trace_inputs(frontend::Graph& g, const models::Model& model, int64_t batch, int64_t seq_len) {
  TracedInputs in;
  for (const models::ParamSpec& s : model.params()) in.params.push_back(g.parameter(s.name, s.shape, s.axes));
  auto shape = frontend::s32({batch, seq_len});
  in.batch = {g.parameter("batch.inputs", shape), g.parameter("batch.targets", shape),
              g.parameter("batch.positions", shape), g.parameter("batch.segmentation", shape)};
  return in;
}

}  // namespace

Result<std::unique_ptr<ForwardProgram>> ForwardProgram::load(const std::string& checkpoint_dir,
                                                             const std::vector<std::string>& overrides, int64_t batch,
                                                             int64_t seq_len) {
  auto p = std::unique_ptr<ForwardProgram>(new ForwardProgram());
  KILN_ASSIGN_OR_RETURN(p->step_dir_, checkpoint::resolve_step_dir(checkpoint_dir));
  KILN_ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader, checkpoint::CheckpointReader::open(p->step_dir_));
  p->step_ = reader.step();
  KILN_ASSIGN_OR_RETURN(config::Config cfg, checkpoint_config(reader.config_yaml(), p->step_dir_, overrides));
  p->config_ = std::make_unique<config::Config>(std::move(cfg));
  KILN_ASSIGN_OR_RETURN(p->model_, models::make_model(*p->config_));
  p->batch_ = batch;
  p->seq_len_ = seq_len;
  p->vocab_ = p->config_->get_int("vocab_size");
  if (batch <= 0) return p;  // the config and model only (e.g. to tokenize before choosing a length)

  // Parameters: every one the model needs, global, in its dtype (any saved layout).
  for (const models::ParamSpec& s : p->model_->params()) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, reader.read_shard("params/" + s.name, s.shape, ir::Sharding{},
                                                               checkpoint::single_device_mesh(), 0));
    backend::Buffer b(s.shape);
    std::memcpy(b.data(), bytes.data(), bytes.size());
    p->params_.push_back(std::move(b));
  }

  // The forward program.
  frontend::Graph g("forward");
  const auto [params, b] = trace_inputs(g, *p->model_, batch, seq_len);
  frontend::Tensor logits = p->model_->logits(g, params, b).astype(ir::DType::kF32);  // [B, T, V]
  frontend::Tensor lse = frontend::nn::logsumexp(logits, -1);                           // [B, T]
  frontend::Tensor target_logit = logits.take(b.targets.expand_dims(-1), -1, 2).squeeze(-1);
  g.set_outputs({logits.named("logits"), (lse - target_logit).named("token_loss")});
  p->module_ = g.release();
  // The backend the config names (backend=, the checkpoint's or an override).
  KILN_ASSIGN_OR_RETURN(p->backend_, backend::backend_for(*p->config_));
  KILN_ASSIGN_OR_RETURN(p->exe_, p->backend_->compile(*p->module_, backend::CompileOptions{}));
  return p;
}

Status ForwardProgram::compile_gradients() {
  frontend::Graph g("gradients");
  const auto [params, b] = trace_inputs(g, *model_, batch_, seq_len_);
  // As train/step/step_program.cc: the model's training loss, then reverse mode over the same
  // computation.
  models::LossOutputs losses = model_->loss(g, params, b);
  std::vector<ir::Instr*> wrt;
  for (const frontend::Tensor& t : params) wrt.push_back(t.instr());
  KILN_ASSIGN_OR_RETURN(std::vector<ir::Instr*> grads, autodiff::gradients(g.computation(), losses.loss.instr(), wrt));
  // The optional terms are absent (invalid) for a model without them: 0.
  auto scalar = [&](const frontend::Tensor& t) { return t.valid() ? t.astype(ir::DType::kF32) : g.scalar(0.0); };
  std::vector<frontend::Tensor> outputs = {scalar(losses.loss), scalar(losses.xent_sum),
                                           scalar(losses.total_weights), scalar(losses.moe_lb_loss),
                                           scalar(losses.z_loss)};
  for (ir::Instr* gi : grads) outputs.emplace_back(&g, gi);
  g.set_outputs(outputs);
  grad_module_ = g.release();
  KILN_ASSIGN_OR_RETURN(grad_exe_, backend_->compile(*grad_module_, backend::CompileOptions{}));
  return ok_status();
}

Result<std::vector<backend::Buffer>> ForwardProgram::arguments(const std::vector<int32_t>& inputs,
                                                               const std::vector<int32_t>& targets,
                                                               const std::vector<int32_t>& positions,
                                                               const std::vector<int32_t>& segmentation) const {
  if (exe_ == nullptr) return failed_precondition("forward: the program was loaded without a batch shape");
  std::vector<backend::Buffer> args = params_;  // shares storage: the programs do not write their arguments
  const ir::Shape shape(ir::DType::kS32, {batch_, seq_len_});
  for (const std::vector<int32_t>* v : {&inputs, &targets, &positions, &segmentation}) {
    if (static_cast<int64_t>(v->size()) != batch_ * seq_len_) {
      return invalid_argument("forward: {} token values for a [{}, {}] batch", v->size(), batch_, seq_len_);
    }
    backend::Buffer b(shape);
    std::memcpy(b.data(), v->data(), v->size() * sizeof(int32_t));
    args.push_back(std::move(b));
  }
  for (const std::vector<int32_t>* v : {&inputs, &targets}) {
    for (int32_t id : *v) {
      if (id < 0 || id >= vocab_) {
        return invalid_argument("token id {} is outside the model's vocabulary (vocab_size={})", id, vocab_);
      }
    }
  }
  return args;
}

Result<ForwardOutputs> ForwardProgram::run(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                                           const std::vector<int32_t>& positions,
                                           const std::vector<int32_t>& segmentation) {
  KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> args, arguments(inputs, targets, positions, segmentation));
  KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> out, exe_->run(args));
  return ForwardOutputs{out.at(0).to_literal(), out.at(1).to_literal()};
}

Result<GradientOutputs> ForwardProgram::gradients(const std::vector<int32_t>& inputs,
                                                  const std::vector<int32_t>& targets,
                                                  const std::vector<int32_t>& positions,
                                                  const std::vector<int32_t>& segmentation) {
  KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> args, arguments(inputs, targets, positions, segmentation));
  if (grad_exe_ == nullptr) KILN_RETURN_IF_ERROR(compile_gradients());
  KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> out, grad_exe_->run(args));
  GradientOutputs g;
  double* scalars[] = {&g.loss, &g.xent_sum, &g.total_weights, &g.moe_lb_loss, &g.z_loss};
  for (size_t i = 0; i < std::size(scalars); ++i) *scalars[i] = out.at(i).to_literal().at(0);
  for (size_t i = std::size(scalars); i < out.size(); ++i) g.grads.push_back(out[i].to_literal());
  return g;
}

}  // namespace kiln::app
