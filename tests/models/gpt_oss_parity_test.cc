// GPT-OSS: YaRN frequencies and parameter counts against the spec, and forward logits,
// losses and every parameter gradient against an independent PyTorch implementation
// (tests/reference/gpt_oss_ref.py) through Hugging Face-layout safetensors files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/autodiff/autodiff.h"
#include "kiln/base/check.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"
#include "kiln/ops/registry.h"
#include "tests/models/safetensors_io.h"
#include "tests/testing/temp_path.h"

namespace kiln::models {
namespace {

using frontend::Tensor;
using testing::HostTensor;

config::Config load_config(std::vector<std::string> overrides, std::string config_path = "") {
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.config_path = std::move(config_path);
  options.overrides = std::move(overrides);
  Result<config::Config> c = config::load(options);
  KILN_CHECK_OK(c);
  return *c;
}

std::unique_ptr<Model> build(const config::Config& config) {
  Result<std::unique_ptr<Model>> m = make_model(config);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// --- spec values ----------------------------------------------------------------------------

TEST(GptOssRope, YarnFrequenciesMatchSpec) {
  auto config = gpt_oss::GptOssConfig::from(load_config({"model_name=gpt-oss-20b"}));
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  std::vector<double> inv = gpt_oss::rope_inv_freq(config->rope);
  ASSERT_EQ(inv.size(), 32u);
  // spec §1.4 test values (6 significant digits).
  const std::vector<std::pair<int, double>> expected = {{0, 1.0},          {1, 0.689044},     {8, 0.0508133},
                                                         {9, 0.0317057},    {17, 1.29319e-4},  {18, 3.83088e-5},
                                                         {31, 3.02351e-7}};
  for (auto [i, v] : expected) EXPECT_NEAR(inv[i], v, 5e-6 * v) << "inv_freq[" << i << "]";
  EXPECT_NEAR(gpt_oss::rope_cos_sin_scale(config->rope), 1.3465736, 1e-7);

  // Truncation (MaxText's base.yml default) would floor/ceil the ramp to [8, 18]: the
  // blended dimensions change, so the key must matter.
  gpt_oss::RopeConfig truncated = config->rope;
  truncated.truncate = true;
  EXPECT_GT(std::abs(gpt_oss::rope_inv_freq(truncated)[17] / inv[17] - 1.0), 0.1);
}

TEST(GptOssParams, CountsMatchPublishedModels) {
  ParamCounts c20 = build(load_config({"model_name=gpt-oss-20b"}))->counts();
  EXPECT_EQ(c20.total, 20'914'757'184);
  EXPECT_EQ(c20.active_per_token, 3'608'307'264);
  ParamCounts c120 = build(load_config({"model_name=gpt-oss-120b"}))->counts();
  EXPECT_EQ(c120.total, 116'829'156'672);
  EXPECT_EQ(c120.active_per_token, 5'132'849'472);
  // The reference run (spec Part 3).
  ParamCounts ref = build(load_config({}, std::string(KILN_SOURCE_DIR) + "/configs/gpt-oss-3.5b-v6e4.yml"))->counts();
  EXPECT_EQ(ref.total, 3'525'462'784);
  // Spec §3.2: "638 M excluding the input embedding" (16 × (attention 10,495,008 + router
  // 32,784 + 2 of 16 experts 25,178,112) + unembedding 67,108,864 + final norm 2,048).
  EXPECT_EQ(ref.active_per_token, 638'405'376);
}

TEST(GptOssParams, NamesShapesAndLogicalAxes) {
  auto model = build(load_config({"model_name=gpt-oss-20b"}));
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(model.get());
  ASSERT_NE(gpt, nullptr);
  auto spec = [&](const std::string& name) -> const ParamSpec& {
    int i = gpt->index(name);
    KILN_CHECK(i >= 0) << "missing " << name;
    return model->params()[i];
  };
  EXPECT_EQ(spec("token_embedder.embedding").shape.dims(), (std::vector<int64_t>{201088, 2880}));
  EXPECT_EQ(spec("token_embedder.embedding").axes, (std::vector<std::string>{"vocab", "embed_vocab"}));
  EXPECT_EQ(spec("layers.3.self_attention.query.kernel").shape.dims(), (std::vector<int64_t>{2880, 64, 64}));
  EXPECT_EQ(spec("layers.3.self_attention.query.kernel").axes, (std::vector<std::string>{"embed", "q_heads", "kv"}));
  EXPECT_EQ(spec("layers.3.self_attention.key.kernel").axes,
            (std::vector<std::string>{"embed", "kv_heads", "kv_head_dim"}));
  EXPECT_EQ(spec("layers.3.self_attention.out.kernel").shape.dims(), (std::vector<int64_t>{64, 64, 2880}));
  EXPECT_EQ(spec("layers.3.self_attention.sinks").shape.dims(), (std::vector<int64_t>{64}));
  EXPECT_EQ(spec("layers.23.mlp.wi_1").shape.dims(), (std::vector<int64_t>{32, 2880, 2880}));
  EXPECT_EQ(spec("layers.23.mlp.wi_1").axes, (std::vector<std::string>{"exp", "embed_moe", "mlp_moe"}));
  EXPECT_EQ(spec("layers.23.mlp.wo").axes, (std::vector<std::string>{"exp", "mlp_moe", "embed_moe"}));
  EXPECT_EQ(spec("layers.0.mlp.gate.kernel").shape.dims(), (std::vector<int64_t>{2880, 32}));
  EXPECT_EQ(spec("logits_dense.kernel").axes, (std::vector<std::string>{"embed_vocab", "vocab"}));
  EXPECT_EQ(spec("layers.0.self_attention.query.kernel").init.kind, Init::Kind::kTruncatedNormalFanIn);
  EXPECT_EQ(spec("layers.0.self_attention.query.kernel").init.fan_in, 2880);
  EXPECT_EQ(spec("layers.0.self_attention.out.kernel").init.fan_in, 4096);
  EXPECT_EQ(spec("layers.0.self_attention.sinks").init.kind, Init::Kind::kZeros);
  EXPECT_EQ(spec("decoder_norm.scale").init.kind, Init::Kind::kOnes);
  for (const ParamSpec& p : model->params()) {
    EXPECT_EQ(static_cast<int>(p.axes.size()), p.shape.rank()) << p.name;
    EXPECT_EQ(p.shape.dtype(), ir::DType::kF32) << p.name;
  }
}

// A Llama-style dense model is a config: one expert, SwiGLU, no biases, no sinks, RoPE.
TEST(GptOssParams, DenseConfigHasNoRouter) {
  auto model = build(load_config({"num_experts=1", "base_num_decoder_layers=2", "base_emb_dim=64",
                                  "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16", "base_mlp_dim=96",
                                  "vocab_size=100"}));
  auto* gpt = dynamic_cast<gpt_oss::GptOss*>(model.get());
  EXPECT_LT(gpt->index("layers.0.mlp.gate.kernel"), 0);
  EXPECT_GE(gpt->index("layers.1.mlp.wi_1.kernel"), 0);
  EXPECT_LT(gpt->index("layers.0.self_attention.sinks"), 0);
  // 2 × (attention 64·64 + 2·64·32 + 64·64, norms 2·64, MLP 3·64·96) + embed, unembed, norm.
  EXPECT_EQ(model->counts().total, 2 * (4096 + 4096 + 4096 + 128 + 3 * 64 * 96) + 2 * 100 * 64 + 64);
}

// --- parity with PyTorch --------------------------------------------------------------------

constexpr int64_t kB = 2, kT = 20, kV = 80, kD = 32, kH = 4, kK = 2, kDh = 16, kE = 4, kTopK = 2, kI = 24;
constexpr int64_t kWindow = 6;
constexpr double kLimit = 7.0;

config::Config parity_config() {
  return load_config({"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=32",
                      "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16", "base_num_decoder_layers=2",
                      "base_moe_mlp_dim=24", "base_mlp_dim=24", "num_experts=4", "num_experts_per_tok=2",
                      "vocab_size=80", "sliding_window_size=6", "load_balance_loss_weight=0.05",
                      "z_loss_multiplier=0.001", "dtype=float32", "max_target_length=20",
                      "per_device_batch_size=2",
                      // Dense dispatch: the clamp statistics below read the [tokens, E, I]
                      // activations; sparse == dense is tested in moe_dispatch_test.
                      "sparse_matmul=false"});
}

// Seeded weights, scaled so that every feature is exercised: sinks comparable to the
// attention logits, router logits spread wide (no near-ties in the top-k), gate/up
// pre-activations of magnitude ~5 (so some are clamped at 7 and some are not).
std::map<std::string, HostTensor> random_weights(const Model& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<std::string, HostTensor> out;
  for (const ParamSpec& p : model.params()) {
    auto ends_with = [&](const std::string& s) {
      return p.name.size() >= s.size() && p.name.compare(p.name.size() - s.size(), s.size(), s) == 0;
    };
    double lo = -0.5, hi = 0.5;
    if (ends_with("scale")) lo = 0.6, hi = 1.4;
    else if (ends_with("embedding")) lo = -1.0, hi = 1.0;
    else if (ends_with("query.kernel") || ends_with("key.kernel")) lo = -0.6, hi = 0.6;
    else if (ends_with("sinks")) lo = 0.5, hi = 2.5;
    else if (ends_with("gate.kernel") || ends_with("gate.bias")) lo = -1.0, hi = 1.0;
    else if (ends_with("wi_0") || ends_with("wi_1")) lo = -1.5, hi = 1.5;
    else if (ends_with("wo")) lo = -0.08, hi = 0.08;
    HostTensor t;
    t.shape = p.shape.dims();
    t.data.resize(p.shape.num_elements());
    std::uniform_real_distribution<double> u(lo, hi);
    for (double& v : t.data) v = static_cast<float>(u(rng));
    out[p.name] = std::move(t);
  }
  return out;
}

struct ParityBatch {
  HostTensor inputs, targets, positions, segmentation;
};

// Row 0: two packed documents (12 and 6 tokens, positions restarting) and 2 padding tokens;
// row 1: one 20-token document, longer than the window.
ParityBatch parity_batch(uint64_t seed) {
  std::mt19937_64 rng(seed);
  ParityBatch b;
  for (HostTensor* t : {&b.inputs, &b.targets, &b.positions, &b.segmentation}) {
    t->shape = {kB, kT};
    t->dtype = "I32";
    t->data.resize(kB * kT);
  }
  for (int64_t i = 0; i < kB * kT; ++i) {
    b.inputs.data[i] = static_cast<double>(rng() % kV);
    b.targets.data[i] = static_cast<double>(rng() % kV);
  }
  for (int64_t t = 0; t < kT; ++t) {
    int seg = t < 12 ? 1 : t < 18 ? 2 : 0;
    b.segmentation.data[t] = seg;
    b.positions.data[t] = seg == 1 ? t : seg == 2 ? t - 12 : 0;
    b.segmentation.data[kT + t] = 1;
    b.positions.data[kT + t] = t;
  }
  return b;
}

// Kiln's parameters (MaxText layout) -> Hugging Face GPT-OSS tensors, through the mapping
// `kiln convert` uses (checkpoint/hf_gpt_oss.h), in float64 so nothing is rounded. Linear in
// the values, so it maps gradients the same way.
std::map<std::string, HostTensor> to_hf(const std::map<std::string, HostTensor>& k) {
  checkpoint::TensorMap kiln;
  for (const auto& [name, t] : k) kiln[name] = ir::Literal(ir::Shape(ir::DType::kF64, t.shape), t.data);
  Result<checkpoint::TensorMap> hf = checkpoint::gpt_oss_to_hf(kiln);
  KILN_CHECK_OK(hf);
  std::map<std::string, HostTensor> out;
  for (const auto& [name, t] : *hf) out[name] = HostTensor{t.shape().dims(), t.values()};
  return out;
}

// The first non-parameter instruction named `name`.
Tensor find_named(frontend::Graph& g, const std::string& name) {
  for (const auto& instr : g.computation().instructions()) {
    if (instr->opcode() != ir::Opcode::kParameter && instr->meta().name == name) return Tensor(&g, instr.get());
  }
  KILN_CHECK(false) << "no value named " << name;
  return {};
}

HostTensor to_host(const ir::Literal& l) { return HostTensor{l.shape().dims(), l.values()}; }

// max |a - b| / max(|b|), with the position of the worst element.
struct Diff {
  double max_abs = 0, ref_max = 0;
  double relative() const { return max_abs / std::max(ref_max, 1e-30); }
};
Diff compare(const HostTensor& a, const HostTensor& b) {
  KILN_CHECK_EQ(a.data.size(), b.data.size());
  Diff d;
  for (size_t i = 0; i < a.data.size(); ++i) {
    d.max_abs = std::max(d.max_abs, std::abs(a.data[i] - b.data[i]));
    d.ref_max = std::max(d.ref_max, std::abs(b.data[i]));
  }
  return d;
}

bool torch_available() {
  return std::system("/usr/bin/python3 -c 'import torch, numpy' > /dev/null 2>&1") == 0;
}

TEST(GptOssParity, LogitsLossAndGradientsMatchPyTorch) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy (Debian python3-torch) is not installed";
  const config::Config config = parity_config();
  auto model = build(config);
  const int64_t layers = 2;

  // Trace loss and gradients.
  frontend::Graph g("gpt_oss_parity");
  std::vector<Tensor> params;
  for (const ParamSpec& p : model->params()) params.push_back(g.parameter(p.name, p.shape, p.axes));
  Batch batch{g.parameter("inputs", frontend::s32({kB, kT})), g.parameter("targets", frontend::s32({kB, kT})),
              g.parameter("positions", frontend::s32({kB, kT})), g.parameter("segmentation", frontend::s32({kB, kT}))};
  LossOutputs lo = model->loss(g, params, batch);
  std::vector<ir::Instr*> wrt;
  for (const Tensor& p : params) wrt.push_back(p.instr());
  auto grads = autodiff::gradients(g.computation(), lo.loss.instr(), wrt);
  ASSERT_TRUE(grads.ok()) << grads.status().to_string();
  std::vector<Tensor> outputs = {lo.loss, lo.xent_sum, lo.total_weights, lo.moe_lb_loss, lo.z_loss,
                                 find_named(g, "logits")};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string mlp = "layers." + std::to_string(l) + ".mlp.";
    for (const char* v : {"router_logits", "combine", "mlpwi_0", "mlpwi_1"}) outputs.push_back(find_named(g, mlp + v));
  }
  const size_t first_grad = outputs.size();
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  g.set_outputs(outputs);
  ASSERT_TRUE(ops::verify(g.module()).ok()) << ops::verify(g.module()).to_string();

  // Run it on seeded weights and a packed batch.
  std::map<std::string, HostTensor> weights = random_weights(*model, 20261129);
  ParityBatch pb = parity_batch(7);
  std::vector<ir::Literal> args;
  for (const ParamSpec& p : model->params()) args.emplace_back(p.shape, weights.at(p.name).data);
  for (HostTensor* t : {&pb.inputs, &pb.targets, &pb.positions, &pb.segmentation})
    args.emplace_back(frontend::s32({kB, kT}), t->data);
  auto result = interp::run(g.module(), args);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const std::vector<ir::Literal>& out = *result;

  // The batch exercises what it should: no near-ties at the top-k boundary (so f32 and f64
  // pick the same experts), and clamps engaged on picked experts (gate > 7, up > 7, up < -7).
  int gate_clamped = 0, up_clamped_high = 0, up_clamped_low = 0, unclamped = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const ir::Literal& router = out[6 + 4 * l];
    const ir::Literal& combine = out[7 + 4 * l];
    const ir::Literal& gate = out[8 + 4 * l];
    const ir::Literal& up = out[9 + 4 * l];
    for (int64_t n = 0; n < kB * kT; ++n) {
      std::vector<double> row(router.values().begin() + n * kE, router.values().begin() + (n + 1) * kE);
      std::sort(row.rbegin(), row.rend());
      EXPECT_GT(row[kTopK - 1] - row[kTopK], 1e-3) << "near-tie in layer " << l << " token " << n;
      for (int64_t e = 0; e < kE; ++e) {
        if (combine.at(n * kE + e) == 0) continue;
        for (int64_t i = 0; i < kI; ++i) {
          double gv = gate.at((n * kE + e) * kI + i), uv = up.at((n * kE + e) * kI + i);
          gate_clamped += gv > kLimit;
          up_clamped_high += uv > kLimit;
          up_clamped_low += uv < -kLimit;
          unclamped += gv < kLimit && std::abs(uv) < kLimit;
        }
      }
    }
  }
  EXPECT_GT(gate_clamped, 0);
  EXPECT_GT(up_clamped_high, 0);
  EXPECT_GT(up_clamped_low, 0);
  EXPECT_GT(unclamped, gate_clamped);
  std::printf("picked-expert activations: %d gate > 7, %d up > 7, %d up < -7, %d unclamped\n", gate_clamped,
              up_clamped_high, up_clamped_low, unclamped);

  // Files for the reference: config.json, HF-layout weights, the batch.
  std::filesystem::path dir = ::kiln::testing::temp_path("kiln_gpt_oss_parity");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json hf_config = {
      {"hidden_size", kD},
      {"num_attention_heads", kH},
      {"num_key_value_heads", kK},
      {"head_dim", kDh},
      {"num_hidden_layers", layers},
      {"num_local_experts", kE},
      {"num_experts_per_tok", kTopK},
      {"intermediate_size", kI},
      {"vocab_size", kV},
      {"rms_norm_eps", config.get_float("normalization_layer_epsilon")},
      {"rope_theta", config.get_float("rope_max_timescale")},
      {"rope_scaling",
       {{"rope_type", "yarn"},
        {"factor", config.get_float("rope_factor")},
        {"beta_fast", config.get_float("beta_fast")},
        {"beta_slow", config.get_float("beta_slow")},
        {"original_max_position_embeddings", config.get_int("original_max_position_embeddings")},
        {"truncate", false}}},
      {"sliding_window", kWindow},
      {"layer_types", {"sliding_attention", "full_attention"}},
      {"swiglu_limit", kLimit},
      {"load_balance_loss_weight", config.get_float("load_balance_loss_weight")},
      {"z_loss_multiplier", config.get_float("z_loss_multiplier")},
  };
  std::ofstream(dir / "config.json") << hf_config.dump(2);
  testing::write_safetensors((dir / "weights.safetensors").string(), to_hf(weights));
  testing::write_safetensors((dir / "batch.safetensors").string(), {{"inputs", pb.inputs},
                                                                    {"targets", pb.targets},
                                                                    {"positions", pb.positions},
                                                                    {"segmentation", pb.segmentation}});
  std::string cmd = "/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) + "/tests/reference/gpt_oss_ref.py " +
                    (dir / "config.json").string() + " " + (dir / "weights.safetensors").string() + " " +
                    (dir / "batch.safetensors").string() + " " + (dir / "ref.safetensors").string() + " float64";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, HostTensor> ref = testing::read_safetensors((dir / "ref.safetensors").string());

  // Tolerances. Kiln runs in float32 (the interpreter rounds every op to f32); the
  // reference runs in float64, so the difference is Kiln's rounding alone: about 6e-8
  // relative per op, grown by the depth of the graph (2 layers, softmaxes, norms) and by
  // cancellation in sums, e.g. a gradient entry that is a sum of many terms of either sign
  // ends up much smaller than the terms, which is why errors are measured against the
  // largest |value| of each tensor rather than elementwise. Scalars get 1e-5 relative
  // (a few hundred ulps), logits 1e-5 of their range, gradients 1e-4 of their largest
  // entry: ~100x what a correct f32 computation shows here, and far below what any
  // modelling difference gives (a wrong mask, sink, clamp, rope dimension or routing
  // changes these by 1e-2 or more).
  auto scalar_check = [&](const char* name, size_t index) {
    double kiln = out[index].scalar_value(), torch = ref.at(name).data.at(0);
    EXPECT_NEAR(kiln, torch, 1e-5 * std::abs(torch) + 1e-7) << name;
  };
  scalar_check("loss", 0);
  scalar_check("xent_sum", 1);
  scalar_check("total_weights", 2);
  scalar_check("moe_lb_loss", 3);
  scalar_check("z_loss", 4);
  EXPECT_EQ(out[2].scalar_value(), 38.0);  // 18 counted tokens in row 0, 20 in row 1
  EXPECT_GT(out[3].scalar_value(), 0.0);

  Diff logits = compare(to_host(out[5]), ref.at("logits"));
  EXPECT_LT(logits.relative(), 1e-5) << "logits: max |diff| " << logits.max_abs << " of " << logits.ref_max;

  std::map<std::string, HostTensor> kiln_grads;
  for (size_t i = 0; i < model->params().size(); ++i)
    kiln_grads[model->params()[i].name] = to_host(out[first_grad + i]);
  std::map<std::string, HostTensor> kiln_hf = to_hf(kiln_grads);
  double worst = 0;
  for (const auto& [name, grad] : kiln_hf) {
    ASSERT_TRUE(ref.count("grad." + name)) << "reference has no gradient for " << name;
    Diff d = compare(grad, ref.at("grad." + name));
    worst = std::max(worst, d.relative());
    EXPECT_GT(d.ref_max, 0.0) << name << " has an all-zero reference gradient";
    EXPECT_LT(d.relative(), 1e-4) << "grad " << name << ": max |diff| " << d.max_abs << " of " << d.ref_max;
  }
  EXPECT_EQ(kiln_hf.size() + 6, ref.size() - 0) << "every reference tensor is compared";
  std::printf("parity: loss %.8f (torch %.8f), logits rel err %.2e, worst gradient rel err %.2e\n",
              out[0].scalar_value(), ref.at("loss").data[0], logits.relative(), worst);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::models
