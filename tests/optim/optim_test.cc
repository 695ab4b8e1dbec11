// AdamW, global-norm clipping and the learning-rate schedules, each built as IR and run on
// the reference interpreter, against hand-written optax formulas in double precision.
// Tolerances: the IR computes in float32 (one rounding per op), so values agree with the
// double reference to a few float32 ulps (relative 1e-6 for single formulas, 1e-5 after
// several chained AdamW steps).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/optim/adamw.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/schedule.h"
#include "tests/testing/random_literals.h"

namespace kiln::optim {
namespace {

using frontend::f32;
using frontend::Graph;
using frontend::s32;
using frontend::Tensor;

std::vector<ir::Literal> run(Graph& g, const std::vector<ir::Literal>& args) {
  auto result = interp::run(g.module(), args);
  KILN_CHECK_OK(result);
  return *result;
}

// ---- schedules ----

// The schedule's IR evaluated at `step`.
double ir_learning_rate(const ScheduleOptions& o, int64_t step) {
  Graph g("schedule");
  Tensor s = g.parameter("step", s32({}));
  g.set_outputs({learning_rate(o, s)});
  return run(g, {ir::Literal::scalar(ir::DType::kS32, static_cast<double>(step))})[0].scalar_value();
}

ScheduleOptions cosine_100() {
  ScheduleOptions o;
  o.learning_rate = 3e-4;
  o.type = ScheduleOptions::Type::kCosine;
  o.warmup_steps_fraction = 0.1;
  o.final_fraction = 0.1;
  o.schedule_steps = 100;
  o.steps = 120;  // 20 steps at lr 0 after the schedule
  return o;
}

TEST(Schedule, CosineHostFormulaAtBoundaries) {
  ScheduleOptions o = cosine_100();
  const double peak = 3e-4, final_lr = 3e-5;
  EXPECT_EQ(o.warmup_steps(), 10);
  EXPECT_EQ(learning_rate_at(o, 0), 0.0);                             // warmup starts at 0
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 5), peak * 5.0 / 9.0);         // linear over Wu - 1 = 9 steps
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 9), peak);                     // last warmup step reaches the peak
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 10), peak);                    // cosine starts at the peak
  double pct = 45.0 / 89.0, a = 0.5 * (std::cos(M_PI * pct) + 1);     // C = 90, pct = s' / (C - 1)
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 55), peak * a + final_lr * (1 - a));
  EXPECT_NEAR(learning_rate_at(o, 99), final_lr, 1e-18);              // last schedule step: the final value
  EXPECT_EQ(learning_rate_at(o, 100), 0.0);                           // after S: 0
  EXPECT_EQ(learning_rate_at(o, 119), 0.0);
  // Without steps beyond S there is no zero piece (MaxText); the cosine simply continues.
  o.steps = 100;
  EXPECT_GT(learning_rate_at(o, 100), 0.0);
}

TEST(Schedule, WsdHostFormulaAtBoundaries) {
  ScheduleOptions o = cosine_100();
  o.type = ScheduleOptions::Type::kWsd;
  o.wsd_decay_steps_fraction = 0.2;  // Dc = 20, stable = 100 - 10 - 20 = 70
  const double peak = 3e-4, final_lr = 3e-5;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 9), peak);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 10), peak);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 79), peak);  // end of the stable phase
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 80), peak);  // decay starts at the peak
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 85), peak + (final_lr - peak) * 5.0 / 19.0);  // linear over Dc - 1
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 99), final_lr);
  EXPECT_EQ(learning_rate_at(o, 100), 0.0);
  o.wsd_decay_style = ScheduleOptions::DecayStyle::kCosine;
  double a = 0.5 * (std::cos(M_PI * 5.0 / 19.0) + 1);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 85), peak * a + final_lr * (1 - a));
  EXPECT_NEAR(learning_rate_at(o, 99), final_lr, 1e-18);
}

TEST(Schedule, IrMatchesHostAtBoundaryStepsForEverySchedule) {
  std::vector<ScheduleOptions> cases;
  ScheduleOptions cos = cosine_100();
  cases.push_back(cos);
  ScheduleOptions wsd_linear = cos;
  wsd_linear.type = ScheduleOptions::Type::kWsd;
  wsd_linear.wsd_decay_steps_fraction = 0.2;
  cases.push_back(wsd_linear);
  ScheduleOptions wsd_cos = wsd_linear;
  wsd_cos.wsd_decay_style = ScheduleOptions::DecayStyle::kCosine;
  cases.push_back(wsd_cos);
  ScheduleOptions no_warmup = cos;  // Wu = 0: the cosine starts at step 0
  no_warmup.warmup_steps_fraction = 0.0;
  cases.push_back(no_warmup);
  ScheduleOptions one_warmup = cos;  // Wu = 1: optax's linear schedule over 0 steps stays at 0
  one_warmup.warmup_steps_fraction = 0.01;
  cases.push_back(one_warmup);
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int64_t step : {0, 1, 5, 9, 10, 11, 50, 79, 80, 81, 98, 99, 100, 101, 119}) {
      double host = learning_rate_at(cases[c], step);
      double ir = ir_learning_rate(cases[c], step);
      EXPECT_NEAR(ir, host, 1e-6 * std::abs(host) + 1e-12) << "case " << c << " step " << step;
    }
  }
  EXPECT_EQ(learning_rate_at(one_warmup, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(no_warmup, 0), 3e-4);
}

TEST(Schedule, FromConfigFollowsMaxTextStepRules) {
  config::LoadOptions lo;
  lo.overrides = {"steps=200", "learning_rate_schedule_steps=-1", "lr_schedule_type=wsd", "wsd_decay_style=cosine",
                  "learning_rate=1e-3"};
  auto cfg = config::load(lo);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto o = ScheduleOptions::from_config(*cfg);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->schedule_steps, 200);
  EXPECT_EQ(o->steps, 200);
  EXPECT_EQ(o->type, ScheduleOptions::Type::kWsd);
  EXPECT_EQ(o->wsd_decay_style, ScheduleOptions::DecayStyle::kCosine);
  EXPECT_EQ(o->learning_rate, 1e-3);
  EXPECT_EQ(o->warmup_steps(), 20);
}

// ---- clipping ----

struct ClipCase {
  std::vector<double> a, b;  // two gradient tensors, f32[3] and f32[2, 2]
};

std::vector<ir::Literal> clip_ir(const ClipCase& c, double threshold) {
  Graph g("clip");
  Tensor a = g.parameter("a", f32({3}));
  Tensor b = g.parameter("b", f32({2, 2}));
  std::vector<Tensor> grads = {a, b};
  Clipped out = clip_by_global_norm(grads, threshold);
  g.set_outputs({out.grads[0], out.grads[1], out.raw_norm, out.norm});
  return run(g, {ir::Literal(f32({3}), c.a), ir::Literal(f32({2, 2}), c.b)});
}

TEST(Clip, ScalesByGlobalNormOnlyAboveTheThreshold) {
  ClipCase c{{0.5, -1.25, 2.0}, {1.5, -0.75, 0.25, 3.0}};
  double sumsq = 0;
  for (double v : c.a) sumsq += v * v;
  for (double v : c.b) sumsq += v * v;
  double norm = std::sqrt(sumsq);  // ~4.24

  // Above the threshold: g / norm * threshold, and the clipped norm is the threshold.
  auto clipped = clip_ir(c, 1.0);
  EXPECT_NEAR(clipped[2].scalar_value(), norm, 1e-6 * norm);
  EXPECT_NEAR(clipped[3].scalar_value(), 1.0, 1e-6);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(clipped[0].at(i), c.a[i] / norm, 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(clipped[1].at(i), c.b[i] / norm, 1e-6);

  // Below the threshold: unchanged (bitwise).
  auto kept = clip_ir(c, 10.0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(kept[0].at(i), static_cast<float>(c.a[i]));
  EXPECT_NEAR(kept[3].scalar_value(), norm, 1e-6 * norm);

  // Threshold 0 turns clipping off; the norms are still reported.
  auto off = clip_ir(c, 0.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(off[1].at(i), static_cast<float>(c.b[i]));
  EXPECT_NEAR(off[2].scalar_value(), norm, 1e-6 * norm);
  EXPECT_EQ(off[2].scalar_value(), off[3].scalar_value());
}

TEST(Clip, ZeroGradientsStayZeroWithoutDividingByTheNorm) {
  // norm 0 < threshold keeps the gradients, so 0 / 0 is never taken (no NaN).
  ClipCase c{{0, 0, 0}, {0, 0, 0, 0}};
  auto out = clip_ir(c, 1.0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[0].at(i), 0.0);
  EXPECT_EQ(out[2].scalar_value(), 0.0);
  EXPECT_EQ(out[3].scalar_value(), 0.0);
}

// ---- AdamW ----

TEST(AdamW, MaskExcludesMatchingNamesFromDecay) {
  std::vector<std::string> names = {"layers.0.mlp.wi_0", "layers.0.attention.query.bias", "decoder_norm.scale",
                                    "token_embedder.embedding"};
  std::vector<std::string> patterns = {"bias", "norm/scale"};  // MaxText's "/"-joined paths work too
  auto mask = weight_decay_mask(names, patterns);
  ASSERT_TRUE(mask.ok());
  EXPECT_EQ(*mask, (std::vector<bool>{true, false, false, true}));
  std::vector<std::string> none;
  EXPECT_EQ(*weight_decay_mask(names, none), (std::vector<bool>(4, true)));
  std::vector<std::string> bad = {"("};
  auto error = weight_decay_mask(names, bad);
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.status().message().find("adamw_mask"), std::string::npos) << error.status().message();
}

TEST(AdamW, FromConfigReadsMaxTextKeys) {
  config::LoadOptions lo;
  lo.overrides = {"adam_b1=0.8", "adam_eps_root=1e-12", "adamw_mask=[bias, norm]", "mu_dtype=bfloat16"};
  auto cfg = config::load(lo);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto o = AdamWOptions::from_config(*cfg);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->b1, 0.8);
  EXPECT_EQ(o->b2, 0.95);
  EXPECT_EQ(o->eps, 1e-8);
  EXPECT_EQ(o->eps_root, 1e-12);
  EXPECT_EQ(o->weight_decay, 0.1);
  EXPECT_EQ(o->mask, (std::vector<std::string>{"bias", "norm"}));
  EXPECT_EQ(o->mu_dtype, ir::DType::kBF16);
}

// optax.adamw(lr, b1, b2, eps, eps_root, weight_decay, mask) by hand, in double.
struct RefAdam {
  std::vector<double> p, mu, nu;
  void update(const std::vector<double>& g, int64_t count, double lr, const AdamWOptions& o, bool decay) {
    double bc1 = 1 - std::pow(o.b1, count + 1), bc2 = 1 - std::pow(o.b2, count + 1);
    for (size_t i = 0; i < p.size(); ++i) {
      mu[i] = (1 - o.b1) * g[i] + o.b1 * mu[i];
      nu[i] = (1 - o.b2) * g[i] * g[i] + o.b2 * nu[i];
      double u = (mu[i] / bc1) / (std::sqrt(nu[i] / bc2 + o.eps_root) + o.eps);
      if (decay) u += o.weight_decay * p[i];
      p[i] += -lr * u;
    }
  }
};

TEST(AdamW, MatchesOptaxOverSeveralStepsWithEpsRootDecayAndMask) {
  AdamWOptions o;
  o.b1 = 0.9;
  o.b2 = 0.95;
  o.eps = 1e-6;
  o.eps_root = 1e-4;
  o.weight_decay = 0.1;
  const std::vector<bool> decay = {true, false};  // the second parameter is masked

  Graph g("adamw");
  std::vector<Tensor> p = {g.parameter("w", f32({2, 3})), g.parameter("b", f32({3}))};
  std::vector<Tensor> grads = {g.parameter("gw", f32({2, 3})), g.parameter("gb", f32({3}))};
  std::vector<Tensor> mu = {g.parameter("mw", f32({2, 3})), g.parameter("mb", f32({3}))};
  std::vector<Tensor> nu = {g.parameter("vw", f32({2, 3})), g.parameter("vb", f32({3}))};
  Tensor step = g.parameter("step", s32({}));
  Tensor lr = g.parameter("lr", f32({}));
  AdamWResult r = adamw_update(o, p, grads, mu, nu, step, lr, decay);
  g.set_outputs({r.params[0], r.params[1], r.mu[0], r.mu[1], r.nu[0], r.nu[1]});

  std::mt19937_64 rng(7);
  std::vector<ir::Literal> state = {testing::random_literal(f32({2, 3}), rng, -1, 1),
                                    testing::random_literal(f32({3}), rng, -1, 1),
                                    ir::Literal(f32({2, 3})), ir::Literal(f32({3})),
                                    ir::Literal(f32({2, 3})), ir::Literal(f32({3}))};
  RefAdam ref_w{state[0].values(), std::vector<double>(6), std::vector<double>(6)};
  RefAdam ref_b{state[1].values(), std::vector<double>(3), std::vector<double>(3)};
  const std::vector<double> lrs = {1e-2, 2e-2, 5e-3, 1e-2, 3e-2};
  for (int64_t count = 0; count < static_cast<int64_t>(lrs.size()); ++count) {
    ir::Literal gw = testing::random_literal(f32({2, 3}), rng, -0.5, 0.5);
    ir::Literal gb = testing::random_literal(f32({3}), rng, -0.05, 0.05);  // small: eps_root matters
    std::vector<ir::Literal> args = {state[0], state[1], gw, gb, state[2], state[3], state[4], state[5],
                                     ir::Literal::scalar(ir::DType::kS32, static_cast<double>(count)),
                                     ir::Literal::scalar(ir::DType::kF32, lrs[count])};
    std::vector<ir::Literal> out = run(g, args);
    state = {out[0], out[1], out[2], out[3], out[4], out[5]};
    double lr_f32 = static_cast<float>(lrs[count]);
    ref_w.update(gw.values(), count, lr_f32, o, true);
    ref_b.update(gb.values(), count, lr_f32, o, false);
    for (int i = 0; i < 6; ++i) {
      EXPECT_NEAR(state[0].at(i), ref_w.p[i], 1e-5 * std::abs(ref_w.p[i]) + 1e-7) << "step " << count;
      EXPECT_NEAR(state[2].at(i), ref_w.mu[i], 1e-5 * std::abs(ref_w.mu[i]) + 1e-9);
      EXPECT_NEAR(state[4].at(i), ref_w.nu[i], 1e-5 * std::abs(ref_w.nu[i]) + 1e-12);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(state[1].at(i), ref_b.p[i], 1e-5 * std::abs(ref_b.p[i]) + 1e-7) << "step " << count;
    }
  }
  // The masked parameter really was not decayed: a decayed reference differs measurably.
  RefAdam decayed_b{ref_b.p, ref_b.mu, ref_b.nu};
  decayed_b.update({0.01, 0.01, 0.01}, 5, 1.0, o, true);
  RefAdam plain_b{ref_b.p, ref_b.mu, ref_b.nu};
  plain_b.update({0.01, 0.01, 0.01}, 5, 1.0, o, false);
  EXPECT_GT(std::abs(decayed_b.p[0] - plain_b.p[0]), 1e-3);
}

TEST(AdamW, FirstStepIsSignOfGradientTimesLearningRate) {
  // With zero moments, eps -> 0 and no decay, bias correction makes step 0's update
  // -lr * g / |g| exactly as in Adam's paper.
  AdamWOptions o;
  o.eps = 0;
  o.weight_decay = 0;
  Graph g("adam0");
  std::vector<Tensor> p = {g.parameter("w", f32({4}))};
  std::vector<Tensor> gr = {g.parameter("g", f32({4}))};
  std::vector<Tensor> mu = {g.parameter("m", f32({4}))};
  std::vector<Tensor> nu = {g.parameter("v", f32({4}))};
  Tensor step = g.parameter("step", s32({}));
  const std::vector<bool> decay = {true};
  AdamWResult r = adamw_update(o, p, gr, mu, nu, step, g.scalar(0.5), decay);
  g.set_outputs({r.params[0]});
  auto out = run(g, {ir::Literal(f32({4}), {1, 2, 3, 4}), ir::Literal(f32({4}), {0.3, -2, 1e-3, -1e-3}),
                     ir::Literal(f32({4})), ir::Literal(f32({4})), ir::Literal::scalar(ir::DType::kS32, 0)});
  EXPECT_NEAR(out[0].at(0), 0.5, 1e-6);
  EXPECT_NEAR(out[0].at(1), 2.5, 1e-6);
  EXPECT_NEAR(out[0].at(2), 2.5, 1e-6);
  EXPECT_NEAR(out[0].at(3), 4.5, 1e-6);
}

TEST(AdamW, MomentsKeepTheirDtypes) {
  AdamWOptions o;
  o.mu_dtype = ir::DType::kBF16;
  Graph g("adam_bf16_mu");
  std::vector<Tensor> p = {g.parameter("w", f32({2}))};
  std::vector<Tensor> gr = {g.parameter("g", f32({2}))};
  std::vector<Tensor> mu = {g.parameter("m", frontend::bf16({2}))};
  std::vector<Tensor> nu = {g.parameter("v", f32({2}))};
  Tensor step = g.parameter("step", s32({}));
  const std::vector<bool> decay = {true};
  AdamWResult r = adamw_update(o, p, gr, mu, nu, step, g.scalar(1e-3), decay);
  EXPECT_EQ(r.params[0].dtype(), ir::DType::kF32);
  EXPECT_EQ(r.mu[0].dtype(), ir::DType::kBF16);
  EXPECT_EQ(r.nu[0].dtype(), ir::DType::kF32);
}

}  // namespace
}  // namespace kiln::optim
