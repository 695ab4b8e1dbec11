// Qwen3-MoE (models/qwen3_moe): parameter counts of the released sizes against transformers,
// the keys the family refuses, and what its router and QK-norm switches do.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

constexpr int64_t kB = 2, kT = 8, kV = 64;

Result<config::Config> try_load(std::vector<std::string> extra, const std::string& model = "qwen3-moe-tiny") {
  std::vector<std::string> overrides = {"model_name=" + model};
  if (model == "qwen3-moe-tiny") {
    for (const char* s : {"override_model_config=true", "base_emb_dim=32", "base_num_query_heads=4",
                          "base_num_kv_heads=2", "head_dim=16", "base_num_decoder_layers=2", "base_moe_mlp_dim=16",
                          "num_experts=8", "num_experts_per_tok=3", "vocab_size=64", "max_target_length=8",
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

std::unique_ptr<Model> build(std::vector<std::string> extra, const std::string& model = "qwen3-moe-tiny") {
  Result<config::Config> c = try_load(std::move(extra), model);
  KILN_CHECK_OK(c);
  Result<std::unique_ptr<Model>> m = make_model(*c);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// Reference counts from transformers 5.24 on the meta device:
//   with torch.device("meta"): m = Qwen3MoeForCausalLM(Qwen3MoeConfig(<the hub config.json's
//   shape: vocab_size, hidden_size, moe_intermediate_size, num_hidden_layers,
//   num_attention_heads, num_key_value_heads, head_dim, num_experts, num_experts_per_tok>))
//   total  = sum(p.numel() for p in m.parameters())
//   active = total - embed_tokens - experts + experts * k / E   (Kiln's count: no input embedding)
TEST(Qwen3MoeParams, CountsMatchTransformers) {
  ParamCounts a3b = build({}, "qwen3-30b-a3b")->counts();
  EXPECT_EQ(a3b.total, 30'532'122'624);
  EXPECT_EQ(a3b.active_per_token, 3'041'867'776);
  ParamCounts a22b = build({}, "qwen3-235b-a22b")->counts();
  EXPECT_EQ(a22b.total, 235'093'634'560);
  EXPECT_EQ(a22b.active_per_token, 21'568'433'664);
}

TEST(Qwen3MoeParams, QkNormScalesNoBiasesNoSinks) {
  auto model = build({});
  auto* m = dynamic_cast<gpt_oss::GptOss*>(model.get());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().routed_score_func, "softmax") << "\"\" means softmax for qwen3_moe";
  const int q = m->index("layers.1.self_attention.query_norm.scale");
  ASSERT_GE(q, 0);
  EXPECT_EQ(model->params()[q].shape.dims(), std::vector<int64_t>{16});
  EXPECT_GE(m->index("layers.1.self_attention.key_norm.scale"), 0);
  for (const char* absent : {"layers.0.self_attention.sinks", "layers.0.self_attention.query.bias",
                             "layers.0.mlp.gate.bias", "layers.0.mlp.wi_0_bias"}) {
    EXPECT_LT(m->index(absent), 0) << absent;
  }
}

TEST(Qwen3MoeConfig, RefusesWhatItDoesNotHaveNamingTheKey) {
  auto message = [](std::vector<std::string> overrides) {
    Result<config::Config> c = try_load(std::move(overrides));
    if (!c.ok()) return c.status().message();
    Result<std::unique_ptr<Model>> m = make_model(*c);
    return m.ok() ? std::string("accepted") : m.status().message();
  };
  for (const char* kv : {"attention_sink=true", "attention_bias=true", "mlp_bias=true", "routed_bias=true",
                         "sliding_window_size=4", "mlp_activations_limit=7", "rope_type=yarn",
                         "routed_score_func=sigmoid", "n_routing_groups=2", "topk_routing_group=1",
                         "first_num_dense_layers=1", "mtp_num_layers=1", "attention_type=mla", "num_experts=1"}) {
    const std::string key = std::string(kv).substr(0, std::string(kv).find('='));
    const std::string m = message({kv, "num_experts_per_tok=1"});
    EXPECT_NE(m.find(key), std::string::npos) << kv << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_NE(message({"mlp_activations=[gelu, linear]"}).find("mlp_activations"), std::string::npos);
  EXPECT_EQ(message({"routed_score_func=softmax"}), "accepted");
  EXPECT_NE(message({"shared_experts=-1"}).find("shared_experts"), std::string::npos);
  // The shared decoder's GPT-OSS refuses QK-norm.
  Result<config::Config> gpt = try_load({"use_qk_norm=true"}, "gpt-oss-tiny");
  ASSERT_TRUE(gpt.ok()) << gpt.status().to_string();
  Result<std::unique_ptr<Model>> m = make_model(*gpt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("use_qk_norm"), std::string::npos) << m.status().message();
}

// The logits of `c` (a GptOss config) on a seeded batch, with parameters from seed 7 (the
// same values for every config of the same parameter list), those whose name contains
// `zeroed` (when given) zero.
std::vector<double> logits(const gpt_oss::GptOssConfig& c, const std::string& zeroed = "") {
  gpt_oss::GptOss model(c);
  frontend::Graph init("init");
  std::vector<Tensor> values;
  for (const ParamSpec& p : model.params()) {
    const bool zero = !zeroed.empty() && p.name.find(zeroed) != std::string::npos;
    values.push_back(zero ? init.full(p.shape.dims(), 0.0, p.shape.dtype()) : initial_value(init, p, 7));
  }
  init.set_outputs(values);
  auto params = interp::run(init.module(), {});
  KILN_CHECK_OK(params);
  std::vector<ir::Literal> args = *params;
  frontend::Graph g("logits");
  std::vector<Tensor> traced;
  for (const ParamSpec& p : model.params()) traced.push_back(g.parameter(p.name, p.shape, p.axes));
  Batch batch{g.parameter("inputs", frontend::s32({kB, kT})), g.parameter("targets", frontend::s32({kB, kT})),
              g.parameter("positions", frontend::s32({kB, kT})), g.parameter("segmentation", frontend::s32({kB, kT}))};
  g.set_outputs({model.logits(g, traced, batch)});
  std::mt19937_64 rng(3);
  std::vector<double> ids(kB * kT), positions(kB * kT), ones(kB * kT, 1.0);
  for (int64_t i = 0; i < kB * kT; ++i) {
    ids[i] = static_cast<double>(rng() % kV);
    positions[i] = static_cast<double>(i % kT);
  }
  for (auto* v : {&ids, &ids, &positions, &ones}) args.emplace_back(frontend::s32({kB, kT}), *v);
  auto out = interp::run(g.module(), args);
  KILN_CHECK_OK(out);
  return (*out)[0].values();
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

// shared_experts: one dense SwiGLU of width S * I beside the routed experts, every token's
// (the shared decoder's, as DeepSeek-V3's).
TEST(Qwen3MoeParams, SharedExpertsAreADenseMlpEveryTokenRuns) {
  auto model = build({"shared_experts=2"});
  auto* m = dynamic_cast<gpt_oss::GptOss*>(model.get());
  ASSERT_NE(m, nullptr);
  const int wi = m->index("layers.1.mlp.shared_experts.wi_1.kernel");
  ASSERT_GE(wi, 0);
  EXPECT_EQ(model->params()[wi].shape.dims(), (std::vector<int64_t>{32, 32}));  // [D, 2 * 16]
  EXPECT_EQ(model->params()[wi].active_fraction, 1.0);
  EXPECT_GE(m->index("layers.0.mlp.shared_experts.wo.kernel"), 0);
  EXPECT_EQ(model->counts().total - build({})->counts().total, 2 * 3 * 32 * 32);
}

// Softmax over all experts then top-k renormalised is the softmax over the k largest logits
// (GPT-OSS's router): the same model up to rounding. Without the renormalisation the weights
// sum to less than 1, and the model differs.
TEST(Qwen3MoeRouter, SoftmaxTopKRenormalisedIsSoftmaxOverTheTopK) {
  auto model = build({});
  gpt_oss::GptOssConfig c = dynamic_cast<gpt_oss::GptOss&>(*model).config();
  ASSERT_TRUE(c.norm_topk_prob);
  gpt_oss::GptOssConfig over_k = c;
  over_k.routed_score_func = "";
  const std::vector<double> qwen = logits(c), gpt = logits(over_k);
  EXPECT_LT(max_rel_diff(qwen, gpt), 1e-5);
  c.norm_topk_prob = false;
  EXPECT_GT(max_rel_diff(logits(c), gpt), 1e-3);
}

// The shared experts run: the logits move when their output projection is zeroed.
TEST(Qwen3MoeParams, SharedExpertsRunInTheForwardPass) {
  auto model = build({"shared_experts=1"});
  const gpt_oss::GptOssConfig c = dynamic_cast<gpt_oss::GptOss&>(*model).config();
  const std::vector<double> with = logits(c);
  for (double v : with) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(max_rel_diff(with, logits(c, "shared_experts.wo.kernel")), 1e-3);
}

}  // namespace
}  // namespace kiln::models
