// calibrate's least-squares fit of t = fixed + roofline / efficiency.
#include <gtest/gtest.h>

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

TEST(KernelRateFit, OneSampleIsAProportionalRate) {
  KernelRate r = fit_kernel_rate({{2e-5, 4e-5}});
  EXPECT_EQ(r.fixed_us, 0);
  EXPECT_NEAR(r.efficiency, 0.5, 1e-12);
}

}  // namespace
}  // namespace kiln::plan
