// The Llama family (decoder_block llama2): the released sizes have the published parameter
// counts, Llama 3.1's RoPE frequencies are transformers', the parameters are a dense
// Llama's, and every key the family does not implement is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/llama/llama.h"
#include "kiln/models/model.h"

namespace kiln::models {
namespace {

Result<config::Config> try_load(std::vector<std::string> overrides) {
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = std::move(overrides);
  return config::load(options);
}

config::Config load(std::vector<std::string> overrides) {
  Result<config::Config> c = try_load(std::move(overrides));
  KILN_CHECK_OK(c);
  return *c;
}

std::unique_ptr<Model> build(const config::Config& config) {
  Result<std::unique_ptr<Model>> m = make_model(config);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// The reference numbers are transformers 5.24's, obtained with
//   with torch.device("meta"): m = LlamaForCausalLM(LlamaConfig(hidden_size=..., intermediate_size=...,
//       num_hidden_layers=..., num_attention_heads=..., num_key_value_heads=8, vocab_size=128256,
//       tie_word_embeddings=..., head_dim=...))
//   sum(p.numel() for p in m.parameters())
// with each model's hub config.json shape (the tied embedding of Llama 3.2 counted once). They
// are the published sizes: 8.03 B, 70.6 B, 406 B, 1.24 B.
TEST(LlamaParams, CountsMatchTransformersForTheReleasedSizes) {
  EXPECT_EQ(build(load({"model_name=llama3-8b"}))->counts().total, 8'030'261'248);
  EXPECT_EQ(build(load({"model_name=llama3.1-8b"}))->counts().total, 8'030'261'248);
  EXPECT_EQ(build(load({"model_name=llama3.1-70b"}))->counts().total, 70'553'706'496);
  EXPECT_EQ(build(load({"model_name=llama3.1-405b"}))->counts().total, 405'853'388'800);
  EXPECT_EQ(build(load({"model_name=llama3.2-1b"}))->counts().total, 1'235'814'400);
  // Active per token: everything but the input embedding, unless it is also the unembedding.
  ParamCounts c8 = build(load({"model_name=llama3.1-8b"}))->counts();
  EXPECT_EQ(c8.active_per_token, c8.total - 128256LL * 4096);
  ParamCounts c1 = build(load({"model_name=llama3.2-1b"}))->counts();
  EXPECT_EQ(c1.active_per_token, c1.total);
}

// transformers' _compute_llama3_parameters (rope_type "llama3") for Llama 3.1 8B: theta 5e5,
// head width 128, factor 8, low/high frequency factors 1 and 4, original context 8192. The
// values are its float32 results: dimension 20 is kept, 30 blended, 40 and up divided by 8.
TEST(LlamaRope, Llama31FrequenciesMatchTransformers) {
  auto c = llama::llama_config(load({"model_name=llama3.1-8b"}));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  std::vector<double> inv = gpt_oss::rope_inv_freq(c->rope);
  ASSERT_EQ(inv.size(), 64u);
  const std::vector<std::pair<int, double>> expected = {{0, 1.0},
                                                         {1, 0.8146172165870667},
                                                         {20, 0.016560440883040428},
                                                         {30, 0.0013718936825171113},
                                                         {40, 3.428102354519069e-05},
                                                         {45, 1.2297638932068367e-05},
                                                         {63, 3.068925877869333e-07}};
  for (auto [i, v] : expected) EXPECT_NEAR(inv[i], v, 1e-6 * v) << "inv_freq[" << i << "]";
  EXPECT_EQ(gpt_oss::rope_cos_sin_scale(c->rope), 1.0);
  // Llama 3 (no scaling) keeps every frequency: dimension 40 is 8 times Llama 3.1's.
  auto plain = llama::llama_config(load({"model_name=llama3-8b"}));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_NEAR(gpt_oss::rope_inv_freq(plain->rope)[40] / inv[40], 8.0, 1e-9);
  EXPECT_NEAR(gpt_oss::rope_inv_freq(plain->rope)[20], inv[20], 1e-15);
}

// llama3-tiny's original context is short enough that the scaling acts on its 32-wide heads.
TEST(LlamaRope, TinyScalingChangesFrequencies) {
  auto scaled = llama::llama_config(load({"model_name=llama3-tiny"}));
  auto plain = llama::llama_config(load({"model_name=llama3-tiny", "override_model_config=true", "rope_type=default"}));
  ASSERT_TRUE(scaled.ok() && plain.ok());
  std::vector<double> a = gpt_oss::rope_inv_freq(scaled->rope), b = gpt_oss::rope_inv_freq(plain->rope);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a[1], b[1]);                      // wavelength 14 < 64 / 4: kept
  EXPECT_GT(a[2], b[2] / 8);                  // wavelength 32: blended
  EXPECT_LT(a[2], b[2]);
  EXPECT_NEAR(a[3], b[3] / 8, 1e-15 * b[3]);  // wavelength 74 > 64: divided
  EXPECT_NEAR(a[15], b[15] / 8, 1e-15 * b[15]);
}

TEST(LlamaParams, ADenseLlamaWithTiedOrUntiedEmbeddings) {
  auto model = build(load({"model_name=llama3.1-8b"}));
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(model.get());
  ASSERT_NE(gpt, nullptr);
  auto spec = [&](const std::string& name) -> const ParamSpec& {
    int i = gpt->index(name);
    KILN_CHECK(i >= 0) << "missing " << name;
    return model->params()[i];
  };
  EXPECT_EQ(spec("layers.31.self_attention.query.kernel").shape.dims(), (std::vector<int64_t>{4096, 32, 128}));
  EXPECT_EQ(spec("layers.31.self_attention.key.kernel").shape.dims(), (std::vector<int64_t>{4096, 8, 128}));
  EXPECT_EQ(spec("layers.0.mlp.wi_0.kernel").shape.dims(), (std::vector<int64_t>{4096, 14336}));
  EXPECT_EQ(spec("layers.0.mlp.wi_1.kernel").axes, (std::vector<std::string>{"embed", "mlp"}));
  EXPECT_EQ(spec("layers.0.mlp.wo.kernel").axes, (std::vector<std::string>{"mlp", "embed"}));
  EXPECT_EQ(spec("logits_dense.kernel").shape.dims(), (std::vector<int64_t>{4096, 128256}));
  for (const char* absent : {"layers.0.self_attention.query.bias", "layers.0.self_attention.sinks",
                             "layers.0.mlp.gate.kernel", "layers.0.mlp.wi_0.bias", "layers.0.mlp.wo.bias"}) {
    EXPECT_LT(gpt->index(absent), 0) << absent;
  }
  // Per layer: 2 norms, q, k, v, out, wi_0, wi_1, wo; then the embedding, final norm, unembedding.
  EXPECT_EQ(model->params().size(), 1u + 32 * 9 + 2);
  // Tied: the unembedding is the embedding.
  auto tied = build(load({"model_name=llama3.2-1b"}));
  EXPECT_LT(dynamic_cast<gpt_oss::GptOss&>(*tied).index("logits_dense.kernel"), 0);
  auto tiny = build(load({"model_name=llama3-tiny"}));
  auto tiny_tied = build(load({"model_name=llama3-tiny", "override_model_config=true", "logits_via_embedding=true"}));
  EXPECT_EQ(tiny->counts().total, 5'114'112);
  EXPECT_EQ(tiny->counts().total - tiny_tied->counts().total, 4096 * 256);
}

// Every switch of the shared decoder that a Llama does not have is refused, in one line that
// names the key and the family.
TEST(LlamaConfigErrors, EachUnimplementedKeyIsRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"attention_sink=true", "attention_sink"},
      {"attention_bias=true", "attention_bias"},
      {"use_qk_norm=true", "use_qk_norm"},
      {"sliding_window_size=16", "sliding_window_size"},
      {"attention_type=mla", "attention_type"},
      {"attention_type=local_sliding", "attention_type"},
      {"rope_type=yarn", "rope_type"},
      {"rope_interleave=true", "rope_interleave"},
      {"num_experts=4", "num_experts"},
      {"mlp_activations=[gelu, linear]", "mlp_activations"},
      {"mlp_activations_limit=7", "mlp_activations_limit"},
      {"mlp_bias=true", "mlp_bias"},
      {"routed_bias=true", "routed_bias"},
      {"shared_experts=1", "shared_experts"},
      {"first_num_dense_layers=2", "first_num_dense_layers"},
      {"mtp_num_layers=1", "mtp_num_layers"},
      {"n_routing_groups=4", "n_routing_groups"},
      {"routed_score_func=sigmoid", "routed_score_func"},
      {"load_balance_loss_weight=0.01", "load_balance_loss_weight"},
      {"fused_qkv=true", "fused_qkv"},
      {"attn_logits_soft_cap=30", "attn_logits_soft_cap"},
  };
  for (const auto& [override, key] : cases) {
    Result<config::Config> c = try_load({"model_name=llama3-tiny", "override_model_config=true", override});
    ASSERT_TRUE(c.ok()) << override << ": " << c.status().to_string();
    Result<std::unique_ptr<Model>> m = make_model(*c);
    ASSERT_FALSE(m.ok()) << override << " was accepted";
    const std::string message = m.status().message();
    EXPECT_EQ(message.rfind(key + ":", 0), 0u) << override << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // The defaults of llama3-tiny are accepted, and GPT-OSS still refuses Llama 3.1's RoPE.
  EXPECT_TRUE(make_model(load({"model_name=llama3-tiny"})).ok());
  Result<std::unique_ptr<Model>> gpt =
      make_model(load({"model_name=gpt-oss-tiny", "override_model_config=true", "rope_type=llama3.1"}));
  ASSERT_FALSE(gpt.ok());
  EXPECT_NE(gpt.status().message().find("decoder_block gpt_oss"), std::string::npos) << gpt.status().message();
}

}  // namespace
}  // namespace kiln::models
