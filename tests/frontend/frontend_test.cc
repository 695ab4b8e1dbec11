#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"
#include "tests/testing/random_literals.h"

namespace kiln::frontend {
namespace {

std::vector<ir::Literal> run(Graph& g, const std::vector<ir::Literal>& args) {
  auto result = interp::run(g.module(), args);
  KILN_CHECK_OK(result);
  return *result;
}

TEST(Frontend, BroadcastingArithmeticAndNames) {
  Graph g("arith");
  Tensor x = g.parameter("x", f32({2, 3}), {"activation_batch", "activation_embed"});
  Tensor b = g.parameter("b", f32({3}));
  Tensor y;
  {
    auto s = g.scope("layers.0");
    y = ((x + b) * 2.0 - 1.0).named("affine");
  }
  g.set_outputs({y, y.sum({1}), y.mean({0}, true)});
  ASSERT_TRUE(ops::verify(g.module()).ok()) << ops::verify(g.module()).to_string();
  EXPECT_EQ(y.instr()->meta().name, "layers.0.affine");
  EXPECT_NE(y.instr()->meta().loc.find("frontend_test.cc:"), std::string::npos) << y.instr()->meta().loc;
  EXPECT_EQ(x.instr()->meta().axes[1], "activation_embed");
  ir::Literal xv(f32({2, 3}), {1, 2, 3, 4, 5, 6});
  ir::Literal bv(f32({3}), {0.5, 0, -1});
  auto out = run(g, {xv, bv});
  EXPECT_EQ(out[0].values(), (std::vector<double>{2, 3, 3, 8, 9, 9}));
  EXPECT_EQ(out[1].values(), (std::vector<double>{8, 26}));
  EXPECT_EQ(out[2].shape(), f32({1, 3}));
  EXPECT_EQ(out[2].values(), (std::vector<double>{5, 6, 6}));
}

TEST(Frontend, EinsumMatchesExplicitLoops) {
  Graph g("einsum");
  Tensor q = g.parameter("q", f32({2, 3, 4}));   // [t, h, d]
  Tensor k = g.parameter("k", f32({5, 3, 4}));   // [s, h, d]
  g.set_outputs({einsum("thd,shd->hts", q, k), matmul(q.reshape({6, 4}), k.reshape({15, 4}).transpose({1, 0}))});
  ASSERT_TRUE(ops::verify(g.module()).ok());
  std::mt19937_64 rng(1);
  auto qv = testing::random_literal(f32({2, 3, 4}), rng, -1, 1);
  auto kv = testing::random_literal(f32({5, 3, 4}), rng, -1, 1);
  auto out = run(g, {qv, kv});
  ASSERT_EQ(out[0].shape(), f32({3, 2, 5}));
  for (int h = 0; h < 3; ++h)
    for (int t = 0; t < 2; ++t)
      for (int s = 0; s < 5; ++s) {
        double acc = 0;
        for (int d = 0; d < 4; ++d) acc += qv.at((t * 3 + h) * 4 + d) * kv.at((s * 3 + h) * 4 + d);
        EXPECT_NEAR(out[0].at((h * 2 + t) * 5 + s), acc, 1e-5);
      }
  EXPECT_EQ(out[1].shape(), f32({6, 15}));
}

TEST(Frontend, SoftmaxRmsNormAndCrossEntropy) {
  Graph g("nn");
  Tensor logits = g.parameter("logits", f32({2, 4}));
  Tensor targets = g.parameter("targets", s32({2}));
  Tensor weights = g.parameter("weights", f32({2}));
  Tensor scale = g.parameter("scale", f32({4}));
  g.set_outputs({nn::softmax(logits, -1), nn::cross_entropy_sum(logits, targets, weights),
                 nn::rms_norm(logits, scale, 1e-5)});
  ASSERT_TRUE(ops::verify(g.module()).ok());
  ir::Literal lv(f32({2, 4}), {1, 2, 3, 4, -1, 0, 1, 100});
  ir::Literal tv(s32({2}), {2, 3});
  ir::Literal wv(f32({2}), {1, 0.5});
  ir::Literal sv(f32({4}), {1, 2, 1, 0.5});
  auto out = run(g, {lv, tv, wv, sv});
  double z0 = std::exp(1) + std::exp(2) + std::exp(3) + std::exp(4);
  EXPECT_NEAR(out[0].at(2), std::exp(3) / z0, 1e-6);
  EXPECT_NEAR(out[0].at(7), 1.0, 1e-6);  // stable even with a logit of 100
  double ce = -(3 - std::log(z0)) + 0.5 * -(100 - std::log(std::exp(-1) + 1 + std::exp(1) + std::exp(100)));
  EXPECT_NEAR(out[1].scalar_value(), ce, 1e-5);
  double rms0 = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5);
  EXPECT_NEAR(out[2].at(1), 2.0 / rms0 * 2, 1e-5);
}

TEST(Frontend, TopKAndOneHot) {
  Graph g("routing");
  Tensor r = g.parameter("router_logits", f32({2, 4}));
  auto [values, indices] = top_k(r, 2);
  g.set_outputs({values, indices, one_hot(indices, 4, DType::kF32).sum({1})});
  ir::Literal rv(f32({2, 4}), {0.1, 0.9, 0.5, -1, 3, 2, 1, 4});
  auto out = run(g, {rv});
  EXPECT_EQ(out[1].values(), (std::vector<double>{1, 2, 3, 0}));
  EXPECT_EQ(out[2].values(), (std::vector<double>{0, 1, 1, 0, 1, 0, 0, 1}));
}

TEST(Frontend, RandomStreamsAreIndependentAndReproducible) {
  auto trace = [] {
    Graph g("init");
    g.set_outputs({g.random({64}, "normal", 42), g.random({64}, "normal", 42)});
    return *interp::run(g.module(), {});
  };
  auto a = trace();
  auto b = trace();
  EXPECT_EQ(a[0], b[0]);
  EXPECT_FALSE(a[0] == a[1]);
  double mean = 0;
  for (double v : a[0].values()) mean += v / 64;
  EXPECT_LT(std::fabs(mean), 0.5);
}

}  // namespace
}  // namespace kiln::frontend
