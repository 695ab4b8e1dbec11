// DeepSeek-V3 (models/deepseek): the released size's parameter count against transformers,
// the keys the family refuses, and the auxiliary-loss-free bias update through the real
// training step (train/step/step_program.cc, LossOutputs::state_updates) on the interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/deepseek/deepseek.h"
#include "kiln/models/model.h"
#include "kiln/train/step/step_program.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

constexpr int64_t kB = 2, kT = 16, kV = 64;

Result<config::Config> try_load(std::vector<std::string> extra, const std::string& model = "deepseek3-tiny") {
  std::vector<std::string> overrides = {"model_name=" + model};
  if (model == "deepseek3-tiny") {
    for (const char* s : {"override_model_config=true", "base_emb_dim=32", "base_num_query_heads=2",
                          "base_num_kv_heads=2", "q_lora_rank=16", "kv_lora_rank=8", "qk_nope_head_dim=8",
                          "qk_rope_head_dim=4", "v_head_dim=8", "base_mlp_dim=32", "base_moe_mlp_dim=8",
                          "base_num_decoder_layers=2", "vocab_size=64", "max_target_length=16",
                          "per_device_batch_size=2"}) {
      overrides.push_back(s);
    }
  }
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = overrides;
  return config::load(options);
}

config::Config load(std::vector<std::string> extra, const std::string& model = "deepseek3-tiny") {
  auto c = try_load(std::move(extra), model);
  KILN_CHECK_OK(c);
  return *c;
}

std::unique_ptr<Model> build(const config::Config& config) {
  auto m = make_model(config);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// transformers 5.24 on the meta device:
//   with torch.device("meta"): m = DeepseekV3ForCausalLM(DeepseekV3Config(num_mtp_layers=0))
//   sum(p.numel() for p in m.parameters())  = 671,026,404,352; the 58 MoE layers' correction
//   biases (e_score_correction_bias [256]) are buffers there, parameters in Kiln: + 14,848.
//   active = total - embed_tokens - routed experts * (1 - 8/256) = 36,625,618,432.
// transformers has no MTP module; Kiln's one module is the projection [2D, D], two norms [D]
// and one MoE decoder layer (model.layers[10]'s 11,507,286,272 with its bias): 11,610,061,056.
TEST(DeepseekParams, CountsMatchTransformers) {
  ParamCounts base = build(load({"override_model_config=true", "mtp_num_layers=0"}, "deepseek3-671b"))->counts();
  EXPECT_EQ(base.total, 671'026'419'200);
  EXPECT_EQ(base.active_per_token, 36'625'618'432);
  ParamCounts mtp = build(load({}, "deepseek3-671b"))->counts();
  EXPECT_EQ(mtp.total - base.total, 11'610'061'056);
  EXPECT_EQ(mtp.active_per_token, base.active_per_token) << "the MTP module is not used when predicting";
}

TEST(DeepseekConfig, RefusesWhatItDoesNotHaveNamingTheKey) {
  auto message = [](std::vector<std::string> overrides, const std::string& model = "deepseek3-tiny") {
    Result<config::Config> c = try_load(std::move(overrides), model);
    if (!c.ok()) return c.status().message();
    Result<std::unique_ptr<Model>> m = make_model(*c);
    return m.ok() ? std::string("accepted") : m.status().message();
  };
  for (const auto& [override, key] : std::vector<std::pair<std::string, std::string>>{
           {"attention_type=global", "attention_type"},
           {"routed_score_func=softmax", "routed_score_func"},
           {"attention_sink=true", "attention_sink"},
           {"n_routing_groups=3", "n_routing_groups"},
           {"topk_routing_group=5", "topk_routing_group"},
           {"load_balance_loss_weight=0.01", "load_balance_loss_weight"},
           {"use_qk_norm=true", "use_qk_norm"},
           {"rope_attention_scaling=true", "rope_attention_scaling"}}) {
    const std::string m = message({override});
    EXPECT_NE(m.find(key), std::string::npos) << override << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(message({"routed_bias_update_rate=0.001"}), "accepted");
  // Other families refuse DeepSeek's switches, and the bias update, in one line.
  EXPECT_NE(message({"routed_bias_update_rate=0.001"}, "gpt-oss-tiny").find("routed_bias_update_rate"), std::string::npos);
  EXPECT_NE(message({"routed_score_func=sigmoid"}, "gpt-oss-tiny").find("routed_score_func"), std::string::npos);
  EXPECT_NE(message({"shared_experts=1"}, "gpt-oss-tiny").find("shared_experts"), std::string::npos);
}

// Runs the real training step on the interpreter: `steps` steps from seed-7 parameters with
// layer 1's correction bias set to `bias` (expert 0 first), returning per step the MoE
// layer's max load (pairs on the busiest expert) and the final state.
struct Trained {
  std::vector<double> max_load;
  std::vector<ir::Literal> state;
  int bias = -1;
};
Trained train(const config::Config& config, std::vector<double> bias, int steps) {
  auto model = build(config);
  auto options = train::StepProgramOptions::from_config(config);
  KILN_CHECK_OK(options);
  auto program = train::build_step_program(*model, *options);
  KILN_CHECK_OK(program);
  const auto& specs = model->params();
  frontend::Graph init("init");
  std::vector<Tensor> values;
  for (const ParamSpec& p : specs) values.push_back(initial_value(init, p, 7));
  init.set_outputs(values);
  auto params = interp::run(init.module(), {});
  KILN_CHECK_OK(params);
  Trained out;
  out.bias = dynamic_cast<const deepseek::Deepseek&>(*model).index("layers.1.mlp.gate.bias");
  KILN_CHECK(out.bias >= 0);
  (*params)[out.bias] = ir::Literal(specs[out.bias].shape, bias);
  std::vector<ir::Literal> state = *params;
  for (const ParamSpec& p : specs) state.emplace_back(p.shape, std::vector<double>(p.shape.num_elements(), 0.0));
  for (const ParamSpec& p : specs) state.emplace_back(p.shape, std::vector<double>(p.shape.num_elements(), 0.0));
  state.emplace_back(frontend::s32({}), std::vector<double>{0.0});
  std::mt19937_64 rng(5);
  for (int s = 0; s < steps; ++s) {
    std::vector<double> ids(kB * kT), targets(kB * kT), positions(kB * kT), ones(kB * kT, 1.0);
    for (int64_t i = 0; i < kB * kT; ++i) {
      ids[i] = static_cast<double>(rng() % kV);
      targets[i] = static_cast<double>(rng() % kV);
      positions[i] = static_cast<double>(i % kT);
    }
    std::vector<ir::Literal> args = state;
    for (const auto& v : {ids, targets, positions, ones}) args.emplace_back(frontend::s32({kB, kT}), v);
    auto result = interp::run(*program->module, args);
    KILN_CHECK_OK(result);
    out.max_load.push_back((*result)[program->expert_load_output()].values()[0]);  // layer 1: the first MoE layer
    state.assign(result->begin(), result->begin() + program->num_state());
  }
  out.state = state;
  return out;
}

// A bias that sends every token to expert 0 (and its group): DeepSeek-V3's update lowers
// the busy experts' bias and raises the idle ones', so the load evens out over the steps.
TEST(DeepseekBiasUpdate, ASkewedRouterEvensOutOverSteps) {
  const std::vector<double> skew = {1.0, 0, 0, 0, 0, 0, 0, 0};
  Trained t = train(load({"routed_bias_update_rate=0.2", "mtp_num_layers=0", "learning_rate=1e-3", "steps=10"}), skew, 8);
  const double pairs = kB * kT * 2;  // top-2
  EXPECT_EQ(t.max_load.front(), kB * kT) << "every token picks expert 0 at first";
  EXPECT_LT(t.max_load.back(), 0.6 * t.max_load.front()) << ::testing::PrintToString(t.max_load);
  EXPECT_GE(t.max_load.back(), pairs / 8);
  // The bias moved by whole steps of the rate and took no optimizer state.
  const std::vector<double>& b = t.state[t.bias].values();
  EXPECT_LT(b[0], 1.0);
  const int64_t n = static_cast<int64_t>(t.state.size() - 1) / 3;
  for (double m : t.state[n + t.bias].values()) EXPECT_EQ(m, 0.0) << "mu of the bias";
  for (double v : t.state[2 * n + t.bias].values()) EXPECT_EQ(v, 0.0) << "nu of the bias";
}

// Rate 0: the bias is exactly as it was (no gradient, no weight decay), so the router stays
// skewed, while the other parameters train.
TEST(DeepseekBiasUpdate, RateZeroLeavesTheBiasExactlyUnchanged) {
  const std::vector<double> skew = {1.0, 0, 0, 0, 0, 0, 0, 0};
  config::Config config = load({"routed_bias_update_rate=0", "mtp_num_layers=0", "learning_rate=1e-3", "steps=10"});
  Trained t = train(config, skew, 3);
  EXPECT_EQ(t.state[t.bias].values(), skew);
  EXPECT_EQ(t.max_load.back(), kB * kT);
  auto model = build(config);
  const int gate = dynamic_cast<const deepseek::Deepseek&>(*model).index("layers.1.mlp.gate.kernel");
  Trained again = train(config, skew, 1);
  EXPECT_NE(t.state[gate].values(), again.state[gate].values()) << "the router's kernel trains";
}

}  // namespace
}  // namespace kiln::models
