#include "forward_program.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <fmt/format.h>

#include "kiln/checkpoint/checkpoint.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"

namespace kiln::app {

namespace {

namespace fs = std::filesystem;

// The checkpoint's resolved config, read back as a CONFIG.yml: its keys win over the model
// file (override_model_config=true), then the caller's key=value overrides.
Result<config::Config> checkpoint_config(const std::string& yaml, const std::string& step_dir,
                                         const std::vector<std::string>& overrides) {
  if (yaml.empty()) return invalid_argument("checkpoint {} holds no resolved config (manifest.json: config)", step_dir);
  const fs::path tmp = fs::temp_directory_path() / fmt::format("kiln-checkpoint-config-{}.yml", ::getpid());
  {
    std::ofstream out(tmp);
    out << yaml;
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
  std::vector<frontend::Tensor> params;
  for (const models::ParamSpec& s : p->model_->params()) params.push_back(g.parameter(s.name, s.shape, s.axes));
  auto shape = frontend::s32({batch, seq_len});
  models::Batch b{g.parameter("batch.inputs", shape), g.parameter("batch.targets", shape),
                  g.parameter("batch.positions", shape), g.parameter("batch.segmentation", shape)};
  frontend::Tensor logits = p->model_->logits(g, params, b).astype(ir::DType::kF32);  // [B, T, V]
  frontend::Tensor lse = frontend::nn::logsumexp(logits, -1);                           // [B, T]
  frontend::Tensor target_logit = logits.take(b.targets.expand_dims(-1), -1, 2).squeeze(-1);
  g.set_outputs({logits.named("logits"), (lse - target_logit).named("token_loss")});
  p->module_ = g.release();
  backend::CompileOptions options;
  KILN_ASSIGN_OR_RETURN(p->exe_, backend::compile_cpu(*p->module_, options));
  return p;
}

Result<ForwardOutputs> ForwardProgram::run(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                                           const std::vector<int32_t>& positions,
                                           const std::vector<int32_t>& segmentation) {
  if (exe_ == nullptr) return failed_precondition("forward: the program was loaded without a batch shape");
  std::vector<backend::Buffer> args = params_;  // shares storage: the program does not write its arguments
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
  KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> out, exe_->run(args));
  return ForwardOutputs{out.at(0).to_literal(), out.at(1).to_literal()};
}

}  // namespace kiln::app
