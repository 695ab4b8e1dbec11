// calibrate's fits: kernel rates (t = fixed + roofline / efficiency), attention rates, and
// the split of a step's collective time on several devices.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/plan/calibrate.h"

namespace kiln::plan {
namespace {

TEST(KernelRateFit, RecoversTheFixedCostAndTheEfficiency) {
  std::vector<std::pair<double, double>> s;
  for (double x : {1e-6, 5e-6, 2e-5, 1e-4, 3e-4}) s.push_back({x, 3e-6 + x / 0.4});
  KernelRate r = fit_kernel_rate(s);
  EXPECT_NEAR(r.fixed_us, 3.0, 1e-6);
  EXPECT_NEAR(r.efficiency, 0.4, 1e-9);
}

TEST(KernelRateFit, ANegativeInterceptFitsThroughTheOrigin) {
  // Times that fall faster than proportional at small sizes: no negative fixed cost.
  std::vector<std::pair<double, double>> s = {{1e-6, 1e-7}, {1e-5, 1.5e-5}, {1e-4, 2e-4}};
  KernelRate r = fit_kernel_rate(s);
  EXPECT_EQ(r.fixed_us, 0);
  EXPECT_GT(r.efficiency, 0);
  double sxt = 0, sxx = 0;
  for (auto [x, t] : s) sxt += x * t, sxx += x * x;
  EXPECT_NEAR(r.efficiency, sxx / sxt, 1e-9);
}

TEST(KernelRateFit, KernelsOfOneSizeGetAProportionalRate) {
  // Two sizes 2x apart with a (noisy) intercept: no fixed cost is read into them.
  KernelRate r = fit_kernel_rate({{1e-4, 3e-4}, {2e-4, 4.2e-4}, {1e-4, 3.1e-4}});
  EXPECT_EQ(r.fixed_us, 0);
  EXPECT_NEAR(r.efficiency, (1e-8 + 4e-8 + 1e-8) / (3e-8 + 8.4e-8 + 3.1e-8), 1e-9);
}

TEST(KernelRateFit, TheFixedCostIsAtMostWhatTheSmallestKernelsTook) {
  // Five small kernels at 5.0-5.4 us, and forty larger ones that each pay 50 us more: a line
  // through all of them crosses zero work at 34 us, above every small kernel's time. The
  // fixed cost stops at the median time of the smallest tenth (4 kernels: 5.0-5.3 us, the
  // upper median 5.2), and the slope is the least-squares one through it.
  std::vector<std::pair<double, double>> s;
  for (int i = 0; i < 5; ++i) s.push_back({1e-7 * (i + 1), 5e-6 + 1e-7 * i});
  for (int i = 1; i <= 40; ++i) s.push_back({1e-5 * i, 5e-5 + 1e-5 * i / 0.5});
  double n = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (auto [x, t] : s) n += 1, sx += x, st += t, sxx += x * x, sxt += x * t;
  const double b = (n * sxt - sx * st) / (n * sxx - sx * sx);
  EXPECT_GT((st - b * sx) / n, 30e-6);  // the plain line's intercept
  const KernelRate r = fit_kernel_rate(s);
  EXPECT_NEAR(r.fixed_us, 5.2, 1e-6);
  double sx_rest = 0;
  for (auto [x, t] : s) sx_rest += x * (t - 5.2e-6);
  EXPECT_NEAR(r.efficiency, sxx / sx_rest, 1e-9);
}

TEST(KernelRateFit, OneSampleIsAProportionalRate) {
  KernelRate r = fit_kernel_rate({{2e-5, 4e-5}});
  EXPECT_EQ(r.fixed_us, 0);
  EXPECT_NEAR(r.efficiency, 0.5, 1e-12);
}

// The "other" class: slices that pay 10 us each and reshapes that pay 0.2 us, both moving
// bytes at 0.8 of the bandwidth. One fixed cost for the class sits at the reshapes' (the
// smallest tenth's median), so every slice would be 10 us short; per opcode each keeps its own.
TEST(KernelRateFit, EachOpcodeOfAMixedClassKeepsItsOwnFixedCost) {
  std::vector<std::pair<double, double>> s;
  std::vector<std::string> ops;
  for (int i = 1; i <= 20; ++i) s.push_back({1e-6 * i, 10e-6 + 1e-6 * i / 0.8}), ops.push_back("slice");
  for (int i = 1; i <= 20; ++i) s.push_back({1e-8 * i, 0.2e-6 + 1e-8 * i / 0.8}), ops.push_back("reshape");
  s.push_back({1e-9, 40e-6}), ops.push_back("sort");  // one kernel: the class's fixed cost
  const KernelRate one = fit_kernel_rate(s);
  EXPECT_LT(one.fixed_us, 1.0);
  const KernelRate r = fit_kernel_rate_by_opcode(s, ops);
  EXPECT_NEAR(r.fixed_us_of("slice"), 10 + 1 / 0.8, 1e-6);  // its smallest kernel's time
  EXPECT_NEAR(r.fixed_us_of("reshape"), 0.2 + 0.01 / 0.8, 1e-6);
  EXPECT_EQ(r.fixed_us_by_opcode.count("sort"), 0u);
  EXPECT_DOUBLE_EQ(r.fixed_us_of("sort"), one.fixed_us);
  // The slope through the times less each opcode's fixed cost.
  double sxt = 0, sxx = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    sxt += s[i].first * (s[i].second - r.fixed_us_of(ops[i]) * 1e-6);
    sxx += s[i].first * s[i].first;
  }
  EXPECT_NEAR(r.efficiency, sxx / sxt, 1e-9);
  // A slice smaller than any timed (0.1 us of bytes, 10.1 us in all): within 15% per
  // opcode, where the class's one fixed cost says under 1 us.
  const double x = 1e-7, measured = 10e-6 + x / 0.8;
  EXPECT_NEAR((r.fixed_us_of("slice") * 1e-6 + x / r.efficiency) / measured, 1, 0.15);
  EXPECT_LT(one.fixed_us * 1e-6 + x / one.efficiency, 1e-6);
}

// The fused class: activations (a logistic per element) moving bytes at 0.25 of the
// bandwidth and optimizer updates at 1.5 of it (their arrays in cache), 2 us each besides.
// One efficiency for the class sits between the two, so a step of activations would be
// predicted about twice too fast; per signature each kind keeps its own, and a signature
// timed once keeps the class's.
TEST(KernelRateFit, EachFusionSignatureKeepsItsOwnEfficiency) {
  const std::string act = "loop add,logistic,mul -> bf16", adam = "input add,div,mul,reduce_sum,sqrt,tuple -> f32";
  std::vector<std::pair<double, double>> s;
  std::vector<std::string> sig;
  for (int i = 1; i <= 10; ++i) s.push_back({1e-5 * i, 2e-6 + 1e-5 * i / 0.25}), sig.push_back(act);
  for (int i = 1; i <= 10; ++i) s.push_back({4e-5 * i, 2e-6 + 4e-5 * i / 1.5}), sig.push_back(adam);
  s.push_back({1e-5, 1e-4}), sig.push_back("loop exp -> f32");
  // A step's many small kernels (scalars, a norm's row sums) hold the class's fixed cost down.
  for (int i = 1; i <= 20; ++i) s.push_back({1e-9 * i, 2e-6 + 1e-9 * i}), sig.push_back("loop convert -> f32");
  const KernelRate one = fit_kernel_rate(s);
  const KernelRate r = fit_kernel_rate_by_signature(s, sig);
  EXPECT_DOUBLE_EQ(r.efficiency, one.efficiency);
  EXPECT_DOUBLE_EQ(r.fixed_us, one.fixed_us);
  ASSERT_EQ(r.efficiency_by_signature.size(), 3u);  // not "loop exp -> f32"
  // Each signature's rooflines over its times less the class's fixed cost.
  double x = 0, t = 0;
  for (size_t i = 0; i < 10; ++i) x += s[i].first, t += s[i].second - r.fixed_us * 1e-6;
  EXPECT_NEAR(r.efficiency_of(act), x / t, 1e-12);
  EXPECT_NEAR(r.efficiency_of(act), 0.25, 0.02);
  EXPECT_NEAR(r.efficiency_of(adam), 1.5, 0.1);
  EXPECT_DOUBLE_EQ(r.efficiency_of("loop exp -> f32"), one.efficiency);
  // The step of ten activations: within 5% per signature, off by far more with the class's.
  double measured = 0, by_signature = 0, by_class = 0;
  for (size_t i = 0; i < 10; ++i) {
    measured += s[i].second;
    by_signature += r.fixed_us * 1e-6 + s[i].first / r.efficiency_of(act);
    by_class += one.fixed_us * 1e-6 + s[i].first / one.efficiency;
  }
  EXPECT_NEAR(by_signature / measured, 1, 0.05);
  EXPECT_LT(by_class / measured, 0.6);
}

AttentionSample attention_sample(double rows, double visited, double seconds) {
  AttentionSample s;
  s.work.rows = rows, s.work.visited_pairs = visited;
  s.seconds = seconds;
  return s;
}

TEST(AttentionRateFit, RecoversTheRowAndPairCosts) {
  std::vector<AttentionSample> s;
  for (double rows : {2048.0, 8192.0, 32768.0}) {
    for (double per_row : {64.0, 128.0, 512.0}) {
      s.push_back(attention_sample(rows, rows * per_row, 20e-6 + rows * 50e-9 + rows * per_row * 3e-9));
    }
  }
  AttentionRate r = fit_attention_rate(s);
  EXPECT_NEAR(r.fixed_us, 20, 1e-6);
  EXPECT_NEAR(r.row_ns, 50, 1e-6);
  EXPECT_NEAR(r.pair_ns, 3, 1e-9);
}

TEST(AttentionRateFit, NoTermComesOutNegative) {
  // Times that fall with the rows at a fixed pair count: an unconstrained fit would give
  // rows a negative cost; the fit drops the term instead.
  std::vector<AttentionSample> s = {attention_sample(1000, 1e6, 4e-3), attention_sample(4000, 1e6, 3e-3),
                                    attention_sample(1000, 4e6, 12e-3), attention_sample(4000, 4e6, 11e-3)};
  AttentionRate r = fit_attention_rate(s);
  EXPECT_GE(r.fixed_us, 0);
  EXPECT_EQ(r.row_ns, 0);
  EXPECT_GT(r.pair_ns, 0);
}

TimedInstruction kernel(double s) { return {false, false, true, s}; }
TimedInstruction start(double s) { return {true, true, false, s}; }
TimedInstruction done(double s) { return {true, false, false, s}; }

TEST(CollectiveSplit, TheLastToArriveWaitedLeastAndTheRestIsWaiting) {
  // Two steps of: kernel, gather start, kernel, gather done, kernel. Device 0 ran ahead in
  // step 1 (waited 5 ms in the done), device 1 in step 2 (waited 3 ms in its start).
  const std::vector<std::vector<TimedInstruction>> devices = {
      {kernel(0.010), start(0.001), kernel(0.004), done(0.006), kernel(0.002),
       kernel(0.012), start(0.001), kernel(0.004), done(0.001), kernel(0.002)},
      {kernel(0.011), start(0.001), kernel(0.008), done(0.001), kernel(0.002),
       kernel(0.010), start(0.004), kernel(0.004), done(0.001), kernel(0.002)}};
  const CollectiveSplit c = split_collective_time(devices, 2);
  // Per step: the devices' mean time in collectives ((0.007 + 0.002) + (0.002 + 0.005)) / 2 / 2.
  EXPECT_NEAR(c.in_collectives_s, 0.004, 1e-12);
  // The least of each collective: step 1 start 1 ms, done 1 ms; step 2 start 1 ms, done 1 ms.
  EXPECT_NEAR(c.transfer_s, 0.002, 1e-12);
  // Compute before each issue, restarting at each step: device 0 10 and 12 ms, device 1 11
  // and 10 ms; the kernels after the start and at a step's end come before no issue.
  EXPECT_NEAR(c.compute_before_s, (0.010 + 0.012 + 0.011 + 0.010) / 2 / 2, 1e-12);
  // As the wait model weighs those spans: 10 ms counts 10 ms, 12 and 11 ms a little less than
  // their share.
  auto weighed = [](double c) { return 0.010 * std::pow(c / 0.010, 0.8); };
  EXPECT_NEAR(c.wait_basis_s, (weighed(0.010) + weighed(0.012) + weighed(0.011) + weighed(0.010)) / 2 / 2, 1e-12);
  EXPECT_EQ(split_collective_time({}, 2).in_collectives_s, 0);
}

}  // namespace
}  // namespace kiln::plan
