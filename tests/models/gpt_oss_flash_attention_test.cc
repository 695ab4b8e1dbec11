// attention=flash (the fused attention op) and attention=dot_product (the composite path)
// give the same GPT-OSS loss and gradients: on a small config with sinks, GQA, a sliding
// window shorter than the sequence on even layers, and a packed row of two documents;
// through the interpreter and through the CPU backend's flash kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/autodiff/autodiff.h"
#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/models/model.h"
#include "kiln/ops/registry.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

constexpr int64_t kB = 2, kT = 12, kV = 64;

config::Config load_config(const std::string& attention) {
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = {"model_name=gpt-oss-tiny",   "override_model_config=true", "base_emb_dim=32",
                       "base_num_query_heads=4",    "base_num_kv_heads=2",        "head_dim=16",
                       "base_num_decoder_layers=2", "base_moe_mlp_dim=32",        "num_experts=4",
                       "num_experts_per_tok=2",     "vocab_size=64",              "sliding_window_size=4",
                       "max_target_length=12",      "per_device_batch_size=2",    "attention=" + attention};
  Result<config::Config> c = config::load(options);
  KILN_CHECK_OK(c);
  return *c;
}

struct Step {
  std::unique_ptr<ir::Module> module;  // outputs: loss, then one gradient per parameter
  std::vector<ir::Literal> args;
  int64_t attention_ops = 0;
};

// Loss and gradients of a model with random parameters (sinks included, so they matter)
// on a seeded packed batch.
Step trace_step(const std::string& attention) {
  auto model = make_model(load_config(attention));
  KILN_CHECK_OK(model);
  frontend::Graph g("step");
  std::vector<Tensor> params;
  for (const ParamSpec& p : (*model)->params()) params.push_back(g.parameter(p.name, p.shape, p.axes));
  Batch batch{g.parameter("inputs", frontend::s32({kB, kT})), g.parameter("targets", frontend::s32({kB, kT})),
              g.parameter("positions", frontend::s32({kB, kT})), g.parameter("segmentation", frontend::s32({kB, kT}))};
  LossOutputs lo = (*model)->loss(g, params, batch);
  std::vector<ir::Instr*> wrt;
  for (const Tensor& p : params) wrt.push_back(p.instr());
  auto grads = autodiff::gradients(g.computation(), lo.loss.instr(), wrt);
  KILN_CHECK_OK(grads);
  std::vector<Tensor> outputs = {lo.loss};
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  g.set_outputs(outputs);
  KILN_CHECK_OK(ops::verify(g.module()));

  Step s;
  for (const auto& instr : g.module().entry()->instructions()) {
    s.attention_ops += instr->opcode() == ir::Opcode::kAttention || instr->opcode() == ir::Opcode::kAttentionGrad;
  }
  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const ParamSpec& p : (*model)->params()) {
    std::vector<double> v(p.shape.num_elements());
    // Sinks of a few units (larger than the logits) and weights of a trained-looking scale.
    bool sink = p.name.find("sinks") != std::string::npos;
    for (double& x : v) x = sink ? 1.0 + normal(rng) : 0.2 * normal(rng);
    s.args.emplace_back(p.shape, std::move(v));
  }
  std::vector<double> inputs(kB * kT), targets(kB * kT), positions(kB * kT), segmentation(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    inputs[i] = static_cast<double>(rng() % kV);
    targets[i] = static_cast<double>(rng() % kV);
    int64_t t = i % kT;
    segmentation[i] = i < kT ? (t < 7 ? 1 : 2) : 1;  // row 0 packs two documents
    positions[i] = i < kT && t >= 7 ? t - 7 : t;
  }
  for (auto* v : {&inputs, &targets, &positions, &segmentation}) s.args.emplace_back(frontend::s32({kB, kT}), *v);
  s.module = g.release();
  return s;
}

// Each gradient within 1e-4 of its largest entry: both paths compute in float32 (every op
// rounds to f32, ~6e-8 relative), and the sums over keys are ordered differently.
void expect_same(const std::vector<ir::Literal>& got, const std::vector<ir::Literal>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_NEAR(got[0].scalar_value(), want[0].scalar_value(), 1e-5 * std::fabs(want[0].scalar_value())) << what << " loss";
  for (size_t i = 1; i < want.size(); ++i) {
    double scale = 0;
    for (double x : want[i].values()) scale = std::max(scale, std::fabs(x));
    ASSERT_GT(scale, 0.0) << what << " gradient " << i << " is zero";
    for (size_t j = 0; j < want[i].values().size(); ++j) {
      ASSERT_NEAR(got[i].at(static_cast<int64_t>(j)), want[i].at(static_cast<int64_t>(j)), 1e-4 * scale)
          << what << " gradient " << i << "[" << j << "]";
    }
  }
}

TEST(GptOssFlashAttention, LossAndGradientsEqualDotProduct) {
  Step flash = trace_step("flash");
  Step dot = trace_step("dot_product");
  EXPECT_EQ(flash.attention_ops, 4);  // 2 layers x (attention, attention_grad)
  EXPECT_EQ(dot.attention_ops, 0);
  auto want = interp::run(*dot.module, dot.args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = interp::run(*flash.module, flash.args);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  expect_same(*got, *want, "interpreter");

  // The CPU backend's flash kernels on the same step.
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_flash_model_cache";
  auto exe = backend::compile_cpu(*flash.module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->report().fallback_by_op.count("attention"), 0u);
  EXPECT_EQ((*exe)->report().fallback_by_op.count("attention_grad"), 0u);
  std::vector<backend::Buffer> buffers;
  for (const auto& a : flash.args) buffers.push_back(backend::Buffer::from_literal(a));
  auto run = (*exe)->run(buffers);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  std::vector<ir::Literal> compiled;
  for (const auto& b : *run) compiled.push_back(b.to_literal());
  expect_same(compiled, *want, "cpu backend");
}

TEST(GptOssFlashAttention, AutoselectedPicksFlashFrom128Tokens) {
  // kT = 12 < 128: the composite path.
  EXPECT_EQ(trace_step("autoselected").attention_ops, 0);
}

}  // namespace
}  // namespace kiln::models
