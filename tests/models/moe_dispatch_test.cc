// The sparse MoE dispatch (sort by expert, grouped matmuls, scatter back) equals the dense
// one-hot dispatch: loss and every parameter gradient of a 2-layer GPT-OSS, computed by the
// interpreter in float64 (the traced module with f32 rewritten to f64, so the two paths'
// different orders of summation agree to ~1e-12). Routers are forced into the corner
// cases: experts that receive no tokens, experts that receive every token, token dropping
// by the capacity, random routing.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <regex>

#include "kiln/autodiff/autodiff.h"
#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/models/gpt_oss/gpt_oss.h"
#include "kiln/models/model.h"
#include "kiln/ops/registry.h"

namespace kiln::models {
namespace {

using frontend::Tensor;

constexpr int64_t kB = 2, kT = 12, kV = 64, kE = 4;

config::Config load_config(std::vector<std::string> extra) {
  std::vector<std::string> overrides = {
      "model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=32",     "base_num_query_heads=4",
      "base_num_kv_heads=2",     "head_dim=16",                "base_num_decoder_layers=2", "base_moe_mlp_dim=24",
      "num_experts=4",           "num_experts_per_tok=2",      "vocab_size=64",        "sliding_window_size=4",
      "max_target_length=12",    "per_device_batch_size=2"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  config::LoadOptions options;
  options.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  options.overrides = overrides;
  Result<config::Config> c = config::load(options);
  KILN_CHECK_OK(c);
  return *c;
}

std::unique_ptr<Model> build(const config::Config& config) {
  Result<std::unique_ptr<Model>> m = make_model(config);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

// Parameter values: MaxText's initialisers (seeded), then `edit` (forcing router choices).
std::vector<ir::Literal> initial_params(const Model& model, int64_t seed) {
  frontend::Graph g("init");
  std::vector<Tensor> values;
  for (const ParamSpec& p : model.params()) values.push_back(initial_value(g, p, seed));
  g.set_outputs(values);
  auto out = interp::run(g.module(), {});
  KILN_CHECK_OK(out);
  return *out;
}

// Traces loss, all gradients and, last, the expert load [layers, 3] (max, mean, dropped).
std::unique_ptr<ir::Module> trace_step(const Model& model) {
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
  std::vector<Tensor> outputs = {lo.loss};
  for (ir::Instr* gi : *grads) outputs.push_back(Tensor(&g, gi));
  outputs.push_back(lo.expert_load);
  g.set_outputs(outputs);
  KILN_CHECK_OK(ops::verify(g.module()));
  return g.release();
}

std::unique_ptr<ir::Module> to_f64(const ir::Module& m) {
  std::string text = std::regex_replace(ir::print_module(m), std::regex(R"(\bf32\[)"), "f64[");
  auto parsed = ir::parse_module(text);
  KILN_CHECK_OK(parsed);
  return std::move(*parsed);
}

std::vector<ir::Literal> batch_args() {
  std::mt19937_64 rng(5);
  std::vector<double> inputs(kB * kT), targets(kB * kT), positions(kB * kT), segmentation(kB * kT);
  for (int64_t i = 0; i < kB * kT; ++i) {
    inputs[i] = static_cast<double>(rng() % kV);
    targets[i] = static_cast<double>(rng() % kV);
    segmentation[i] = 1;
    positions[i] = static_cast<double>(i % kT);
  }
  std::vector<ir::Literal> out;
  for (auto* v : {&inputs, &targets, &positions, &segmentation}) out.emplace_back(frontend::s32({kB, kT}), *v);
  return out;
}

using Edit = std::function<void(const gpt_oss::GptOss&, std::vector<ir::Literal>&)>;

// Loss and gradients in float64 for one config.
std::vector<ir::Literal> run(const std::vector<std::string>& overrides, const Edit& edit) {
  auto model = build(load_config(overrides));
  std::vector<ir::Literal> params = initial_params(*model, 11);
  if (edit) edit(dynamic_cast<const gpt_oss::GptOss&>(*model), params);
  auto module = to_f64(*trace_step(*model));
  int grouped = 0;
  for (const auto& instr : module->entry()->instructions()) grouped += instr->opcode() == ir::Opcode::kGroupedMatmul;
  // Forward: wi_0, wi_1, wo per layer; backward: the input gradients of each.
  EXPECT_EQ(grouped, dynamic_cast<const gpt_oss::GptOss&>(*model).config().sparse_matmul ? 2 * 3 * 2 : 0);
  std::vector<ir::Literal> args;
  for (const ir::Literal& p : params) args.emplace_back(p.shape().with_dtype(ir::DType::kF64), p.values());
  for (ir::Literal& b : batch_args()) args.push_back(std::move(b));
  auto out = interp::run(*module, args);
  KILN_CHECK_OK(out);
  return *out;
}

// Returns the expert load of the sparse run ([layers, 3]: max, mean, dropped).
ir::Literal expect_sparse_equals_dense(std::vector<std::string> overrides, const Edit& edit) {
  std::vector<std::string> sparse = overrides, dense = overrides;
  sparse.push_back("sparse_matmul=true");
  dense.push_back("sparse_matmul=false");
  std::vector<ir::Literal> s = run(sparse, edit), d = run(dense, edit);
  KILN_CHECK_EQ(s.size(), d.size());
  EXPECT_TRUE(std::isfinite(s[0].scalar_value()));
  for (size_t i = 0; i < s.size(); ++i) {
    KILN_CHECK(s[i].shape() == d[i].shape());
    double scale = 0;
    for (double v : d[i].values()) scale = std::max(scale, std::fabs(v));
    for (int64_t j = 0; j < s[i].shape().num_elements(); ++j) {
      // float64 with different summation orders: agreement to ~1e-12 of the output's scale.
      EXPECT_NEAR(s[i].at(j), d[i].at(j), 1e-10 * (1.0 + scale)) << "output " << i << " element " << j;
    }
  }
  return s.back();
}

// Router of every layer: zero kernel, bias `bias`: every token picks the same experts.
Edit force_router(std::vector<double> bias) {
  return [bias](const gpt_oss::GptOss& model, std::vector<ir::Literal>& params) {
    for (int64_t l = 0; l < model.config().layers; ++l) {
      std::string prefix = "layers." + std::to_string(l) + ".mlp.gate.";
      ir::Literal& kernel = params[model.index(prefix + "kernel")];
      for (double& v : kernel.mutable_values()) v = 0.0;
      ir::Literal& b = params[model.index(prefix + "bias")];
      b = ir::Literal(b.shape(), bias);
    }
  };
}

// Router bias only shifted: the kernel still varies the choice per token, but expert 3
// never wins and expert 0 almost always does.
Edit skew_router() {
  return [](const gpt_oss::GptOss& model, std::vector<ir::Literal>& params) {
    for (int64_t l = 0; l < model.config().layers; ++l) {
      ir::Literal& b = params[model.index("layers." + std::to_string(l) + ".mlp.gate.bias")];
      b = ir::Literal(b.shape(), {2.0, 0.0, 0.1, -100.0});
    }
  };
}

TEST(MoeDispatch, SparseEqualsDenseAtInitialisation) { expect_sparse_equals_dense({}, nullptr); }

TEST(MoeDispatch, ExpertsWithAllTokensAndExpertsWithNone) {
  // Top-2 of {0, 1, 2, 3} with bias 3 > 1 > 0 > -1: experts 0 and 1 get every token, 2 and 3 none.
  ir::Literal load = expect_sparse_equals_dense({}, force_router({3.0, 1.0, 0.0, -1.0}));
  // Per layer: max = every token (24), mean = 24 * 2 / 4 = 12, nothing dropped.
  EXPECT_EQ(load.values(), std::vector<double>({24, 12, 0, 24, 12, 0}));
  // The order reversed: the last experts get the tokens (groups 0 and 1 empty).
  load = expect_sparse_equals_dense({}, force_router({-1.0, 0.0, 1.0, 3.0}));
  EXPECT_EQ(load.values(), std::vector<double>({24, 12, 0, 24, 12, 0}));
}

TEST(MoeDispatch, SkewedRouterAndTop1) {
  expect_sparse_equals_dense({}, skew_router());
  expect_sparse_equals_dense({"num_experts_per_tok=1"}, skew_router());
}

TEST(MoeDispatch, TokenDroppingMatchesBetweenDispatches) {
  // Capacity 1.0: ceil(12 * 2 / 4) = 6 pairs per expert per sequence; the skewed router
  // sends ~12 to expert 0, so about half of those are dropped.
  ir::Literal load = expect_sparse_equals_dense({"capacity_factor=1.0"}, skew_router());
  EXPECT_GT(load.at(2), 0.0) << "layer 0 dropped nothing";
  EXPECT_GT(load.at(5), 0.0) << "layer 1 dropped nothing";
  // Dropping changes the loss.
  double dropless = run({}, skew_router())[0].scalar_value();
  double dropping = run({"capacity_factor=1.0"}, skew_router())[0].scalar_value();
  EXPECT_NE(dropless, dropping);
  // A capacity above every load drops nothing.
  EXPECT_NEAR(run({"capacity_factor=10.0"}, skew_router())[0].scalar_value(), dropless, 1e-12);
}

TEST(MoeDispatch, RandomRouting) {
  // The skewed router would send every token to expert 0 (max load 24); random picks spread them.
  ir::Literal load = expect_sparse_equals_dense({"use_random_routing=true"}, skew_router());
  EXPECT_LT(load.at(0), 24.0);
  EXPECT_LT(load.at(3), 24.0);
}

TEST(MoeDispatch, BackendCompilesTheSparseStep) {
  // The f32 step with grouped matmuls compiled by the CPU backend equals the interpreter.
  auto model = build(load_config({"sparse_matmul=true"}));
  std::vector<ir::Literal> params = initial_params(*model, 11);
  skew_router()(dynamic_cast<const gpt_oss::GptOss&>(*model), params);
  auto module = trace_step(*model);
  std::vector<ir::Literal> args = params;
  // (the interpreter's outputs and the compiled ones include the expert load)
  for (ir::Literal& b : batch_args()) args.push_back(std::move(b));
  auto want = interp::run(*module, args);
  KILN_CHECK_OK(want);
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_moe_cache";
  auto exe = backend::compile_cpu(*module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->report().fallback_by_op.count("grouped_matmul"), 0u);
  EXPECT_EQ((*exe)->report().fallback_by_op.count("grouped_matmul_weight_grad"), 0u);
  std::vector<backend::Buffer> inputs;
  for (const ir::Literal& a : args) inputs.push_back(backend::Buffer::from_literal(a));
  auto got = (*exe)->run(inputs);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) {
    const ir::Literal& w = (*want)[i];
    double scale = 0;
    for (double v : w.values()) scale = std::max(scale, std::fabs(v));
    for (int64_t j = 0; j < w.shape().num_elements(); ++j) {
      // f32 with different summation orders (sgemm blocking): relative 1e-4 of the scale.
      ASSERT_NEAR((*got)[i].get(j), w.at(j), 1e-4 * (1.0 + scale)) << "output " << i << " element " << j;
    }
  }
}

}  // namespace
}  // namespace kiln::models
