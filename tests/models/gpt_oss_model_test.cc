// GPT-OSS model variants and initialisation: MaxText's initialisers, and that every switch
// (bf16 compute, dense SwiGLU MLP, plain RoPE, tied embeddings, interleaved YaRN) traces,
// differentiates and runs to a sane loss.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"
#include "kiln/ops/registry.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

constexpr int64_t kB = 2, kT = 12, kV = 64;

Result<config::Config> try_load_config(std::vector<std::string> extra) {
  std::vector<std::string> overrides = {
      "model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=32",     "base_num_query_heads=4",
      "base_num_kv_heads=2",     "head_dim=16",                "base_num_decoder_layers=2", "base_moe_mlp_dim=32",
      "base_mlp_dim=48",         "num_experts=4",              "num_experts_per_tok=2", "vocab_size=64",
      "sliding_window_size=4",   "max_target_length=12",       "per_device_batch_size=2"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = overrides;
  return config::load(options);
}

config::Config load_config(std::vector<std::string> extra) {
  Result<config::Config> c = try_load_config(std::move(extra));
  KILN_CHECK_OK(c);
  return *c;
}

std::unique_ptr<Model> build(const config::Config& config) {
  Result<std::unique_ptr<Model>> m = make_model(config);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// Traces the initial parameters of `model` and returns their values.
std::vector<ir::Literal> initial_params(const Model& model, int64_t seed) {
  frontend::Graph g("init");
  std::vector<Tensor> values;
  for (const ParamSpec& p : model.params()) values.push_back(initial_value(g, p, seed));
  g.set_outputs(values);
  auto out = interp::run(g.module(), {});
  KILN_CHECK_OK(out);
  return *out;
}

double stddev(const std::vector<double>& v) {
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

TEST(GptOssInit, FollowsMaxTextInitialisers) {
  auto model = build(load_config({}));
  std::vector<ir::Literal> values = initial_params(*model, 3);
  ASSERT_EQ(values.size(), model->params().size());
  for (size_t i = 0; i < values.size(); ++i) {
    const ParamSpec& p = model->params()[i];
    const std::vector<double>& v = values[i].values();
    switch (p.init.kind) {
      case Init::Kind::kZeros:
        for (double x : v) ASSERT_EQ(x, 0.0) << p.name;
        break;
      case Init::Kind::kOnes:
        for (double x : v) ASSERT_EQ(x, 1.0) << p.name;
        break;
      case Init::Kind::kNormal:
        EXPECT_NEAR(stddev(v), p.init.stddev, 0.1 * p.init.stddev) << p.name;
        break;
      case Init::Kind::kTruncatedNormalFanIn: {
        double expected = std::sqrt(1.0 / static_cast<double>(p.init.fan_in));
        if (v.size() >= 1000) EXPECT_NEAR(stddev(v), expected, 0.1 * expected) << p.name;
        double bound = 2.0 * expected / 0.87962566103423978 + 1e-6;
        for (double x : v) ASSERT_LE(std::abs(x), bound) << p.name;
        break;
      }
    }
  }
  // Seeded: the same seed gives the same values, another seed others.
  EXPECT_EQ(initial_params(*model, 3)[0], values[0]);
  EXPECT_NE(initial_params(*model, 4)[0], values[0]);
}

struct RunResult {
  double loss = 0, xent = 0, lb = 0, z = 0;
  bool grads_finite = true;
  double grad_norm = 0;
  std::vector<double> grads;  // every parameter's gradient, flattened in params() order
};

// Initialises the model, traces loss and gradients, and runs them on a seeded packed batch.
RunResult run_step(const Model& model) {
  std::vector<ir::Literal> args = initial_params(model, 11);
  frontend::Graph g("step");
  std::vector<Tensor> params;
  for (const ParamSpec& p : model.params()) params.push_back(g.parameter(p.name, p.shape, p.axes));
  Batch batch{g.parameter("inputs", frontend::s32({kB, kT})), g.parameter("targets", frontend::s32({kB, kT})),
              g.parameter("positions", frontend::s32({kB, kT})), g.parameter("segmentation", frontend::s32({kB, kT}))};
  LossOutputs lo = model.loss(g, params, batch);
  std::vector<ir::Instr*> wrt;
  for (const Tensor& p : params) wrt.push_back(p.instr());
  auto grads = autodiff::gradients(g.computation(), lo.loss.instr(), wrt);
  KILN_CHECK_OK(grads);
  std::vector<Tensor> outputs = {lo.loss, lo.xent_sum, lo.moe_lb_loss, lo.z_loss};
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  g.set_outputs(outputs);
  KILN_CHECK_OK(ops::verify(g.module()));

  std::mt19937_64 rng(5);
  std::vector<double> inputs(kB * kT), targets(kB * kT), positions(kB * kT), segmentation(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    inputs[i] = static_cast<double>(rng() % kV);
    targets[i] = static_cast<double>(rng() % kV);
    int64_t t = i % kT;
    segmentation[i] = i < kT ? (t < 7 ? 1 : 2) : 1;  // row 0 packs two documents
    positions[i] = i < kT && t >= 7 ? t - 7 : t;
  }
  for (auto* v : {&inputs, &targets, &positions, &segmentation}) args.emplace_back(frontend::s32({kB, kT}), *v);
  auto out = interp::run(g.module(), args);
  KILN_CHECK_OK(out);
  RunResult r;
  r.loss = (*out)[0].scalar_value();
  r.xent = (*out)[1].scalar_value();
  r.lb = (*out)[2].scalar_value();
  r.z = (*out)[3].scalar_value();
  for (size_t i = 4; i < out->size(); ++i) {
    for (double x : (*out)[i].values()) {
      r.grads_finite = r.grads_finite && std::isfinite(x);
      r.grad_norm += x * x;
      r.grads.push_back(x);
    }
  }
  r.grad_norm = std::sqrt(r.grad_norm);
  return r;
}

// At MaxText's initialisation the logits are small, so the loss starts near ln V.
void expect_sane(const RunResult& r, const std::string& what) {
  EXPECT_TRUE(std::isfinite(r.loss)) << what;
  EXPECT_NEAR(r.loss, std::log(static_cast<double>(kV)), 1.5) << what;
  EXPECT_TRUE(r.grads_finite) << what;
  EXPECT_GT(r.grad_norm, 0.0) << what;
}

TEST(GptOssVariants, Bfloat16ComputeTracksFloat32) {
  RunResult f32 = run_step(*build(load_config({"load_balance_loss_weight=0.01", "z_loss_multiplier=0.0001"})));
  RunResult bf16 = run_step(
      *build(load_config({"load_balance_loss_weight=0.01", "z_loss_multiplier=0.0001", "dtype=bfloat16"})));
  expect_sane(f32, "float32");
  expect_sane(bf16, "bfloat16");
  // bf16 keeps 8 significand bits (~0.4 % per rounding); the loss statistics stay in f32.
  EXPECT_NEAR(bf16.loss, f32.loss, 0.02 * f32.loss);
  EXPECT_NE(bf16.loss, f32.loss) << "bf16 rounding should show";
  // Load-balance loss near its balanced value k * weight = 0.02; z-loss ~ 1e-4 * (ln V)^2.
  EXPECT_NEAR(f32.lb, 0.02, 0.01);
  EXPECT_GT(f32.z, 0.0);
}

TEST(GptOssVariants, LlamaStyleDenseModel) {
  // One expert = a dense MLP; SwiGLU; no biases or sinks; plain RoPE; all layers full.
  auto config = load_config({"num_experts=1", "num_experts_per_tok=1", "mlp_activations=[silu, linear]",
                             "mlp_activations_limit=-1", "mlp_bias=false", "routed_bias=false",
                             "attention_bias=false", "attention_sink=false", "sliding_window_size=0",
                             "rope_type=default", "rope_max_timescale=10000"});
  auto model = build(config);
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(model.get());
  EXPECT_GE(gpt->index("layers.0.mlp.wo.kernel"), 0);
  EXPECT_LT(gpt->index("layers.0.mlp.gate.kernel"), 0);
  RunResult r = run_step(*model);
  expect_sane(r, "dense");
  EXPECT_EQ(r.lb, 0.0);
}

TEST(GptOssVariants, TiedEmbeddingsAndInterleavedRope) {
  auto model = build(load_config({"logits_via_embedding=true", "rope_interleave=true"}));
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(model.get());
  EXPECT_LT(gpt->index("logits_dense.kernel"), 0);
  // Tied: the embedding is the unembedding too, so it counts as active.
  EXPECT_EQ(model->params()[gpt->index("token_embedder.embedding")].active_fraction, 1.0);
  expect_sane(run_step(*model), "tied");
}

// The loss over 3 tiles of the sequence (4 tokens each) is the loss over the whole logits:
// the same values and gradients, summed in another order.
TEST(GptOssVariants, VocabTilesGiveTheWholeLogitsLossAndGradients) {
  const std::vector<std::string> base = {"load_balance_loss_weight=0.01", "z_loss_multiplier=0.0001"};
  std::vector<std::string> whole = base, tiled = base;
  whole.push_back("num_vocab_tiling=1");
  tiled.push_back("num_vocab_tiling=3");
  RunResult a = run_step(*build(load_config(whole)));
  RunResult b = run_step(*build(load_config(tiled)));
  expect_sane(b, "tiled");
  EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss);
  EXPECT_NEAR(b.xent, a.xent, 1e-6 * a.xent);
  EXPECT_NEAR(b.z, a.z, 1e-6 * a.z);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double worst = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) worst = std::max(worst, std::abs(a.grads[i] - b.grads[i]));
  EXPECT_LT(worst, 1e-6 * a.grad_norm);
  // -1 (the default) chooses: these logits are tiny, so one tile.
  auto chosen = build(load_config(base));
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(chosen.get());
  ASSERT_NE(gpt, nullptr);
  EXPECT_EQ(gpt->config().vocab_tiles, 1);
}

TEST(GptOssConfigErrors, NameTheKey) {
  // Rejected by config::load or by make_model; either way the message names the key.
  auto bad = [](std::vector<std::string> overrides) {
    Result<config::Config> c = try_load_config(std::move(overrides));
    if (!c.ok()) return c.status().message();
    Result<std::unique_ptr<Model>> m = make_model(*c);
    EXPECT_FALSE(m.ok());
    return m.ok() ? std::string() : m.status().message();
  };
  EXPECT_NE(bad({"rope_type=llama3.1"}).find("rope_type"), std::string::npos);
  EXPECT_NE(bad({"head_dim=15"}).find("head_dim"), std::string::npos);
  EXPECT_NE(bad({"mlp_activations=[swish, linear]"}).find("mlp_activations"), std::string::npos);
  EXPECT_NE(bad({"decoder_block=llama2"}).find("decoder_block"), std::string::npos);
  const std::string tiles = bad({"num_vocab_tiling=5"});
  EXPECT_NE(tiles.find("num_vocab_tiling=5"), std::string::npos) << tiles;
  EXPECT_NE(tiles.find("max_target_length=12"), std::string::npos) << tiles;
  // One device routes its 2 x 12 tokens at once: 5 chunks do not divide them.
  const std::string chunks = bad({"num_moe_chunks=5"});
  EXPECT_NE(chunks.find("num_moe_chunks=5"), std::string::npos) << chunks;
  EXPECT_NE(chunks.find("divide 24"), std::string::npos) << chunks;
}

// num_moe_chunks=-1 (the default) from the worst-case exchange buffer per device: 8 expert
// shards x 16,384 tokens x 4 picks rows of 2,880 bf16 values are 3 GiB, so gpt-oss-120b's
// 16,384 tokens per device go in 16 chunks to fit 256 MiB; without expert parallelism
// nothing is worst-case (1), nor on one device; a small model needs none.
TEST(GptOssConfig, MoeChunksChosenFromTheWorstCaseExchange) {
  auto chunks = [](std::vector<std::string> overrides) {
    config::LoadOptions options;
    options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
    options.overrides = std::move(overrides);
    Result<config::Config> c = config::load(options);
    KILN_CHECK_OK(c);
    Result<std::unique_ptr<Model>> m = make_model(*c);
    KILN_CHECK_OK(m);
    return dynamic_cast<gpt_oss::GptOss&>(**m).config().moe_chunks;
  };
  const std::vector<std::string> big = {"model_name=gpt-oss-120b", "dtype=bfloat16", "per_device_batch_size=4",
                                        "max_target_length=4096", "local_devices=64"};
  auto with = [&](std::vector<std::string> mesh) {
    std::vector<std::string> o = big;
    o.insert(o.end(), mesh.begin(), mesh.end());
    return o;
  };
  EXPECT_EQ(chunks(with({"ici_fsdp_parallelism=8", "ici_expert_parallelism=8"})), 16);
  EXPECT_EQ(chunks(with({"ici_fsdp_parallelism=64"})), 1);
  EXPECT_EQ(chunks(with({"ici_fsdp_parallelism=8", "ici_expert_parallelism=8", "num_moe_chunks=32"})), 32);
  EXPECT_EQ(chunks({"model_name=gpt-oss-120b", "dtype=bfloat16", "per_device_batch_size=4", "max_target_length=4096"}), 1);
  EXPECT_EQ(chunks({"model_name=gpt-oss-tiny", "local_devices=4", "ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}), 1);
}

}  // namespace
}  // namespace kiln::models
