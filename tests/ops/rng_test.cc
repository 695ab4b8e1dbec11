// The counter-based generator (ops/rng.h): its distributions against their exact CDFs, the
// same bits from the vector loop and from one element at a time, and the block of a split
// rng equal to the same elements of the whole array.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "kiln/ops/rng.h"

namespace kiln::ops {
namespace {

constexpr int64_t kSamples = 1 << 20;

std::vector<float> draw(RngDistribution dist, int64_t seed, int64_t first, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  rng_fill(dist, seed, first, count, v.data());
  return v;
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Kolmogorov-Smirnov distance between the samples and `cdf`.
template <typename Cdf>
double ks_distance(std::vector<float> v, Cdf cdf) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = cdf(v[i]);
    worst = std::max({worst, std::fabs(f - i / n), std::fabs(f - (i + 1) / n)});
  }
  return worst;
}

// 1.63 / sqrt(n) is the Kolmogorov distribution's 1% point: a wrong logarithm or cosine
// polynomial, a lost quadrant or a biased redraw moves the distance far past it.
double ks_limit() { return 1.63 / std::sqrt(static_cast<double>(kSamples)); }

TEST(Rng, NormalIsAStandardNormal) {
  const std::vector<float> v = draw(RngDistribution::kNormal, 7, 0, kSamples);
  double sum = 0, sq = 0, fourth = 0, largest = 0;
  for (float x : v) {
    sum += x;
    sq += double{x} * x;
    fourth += double{x} * x * x * x;
    largest = std::max(largest, std::fabs(double{x}));
  }
  const double mean = sum / kSamples, var = sq / kSamples - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(var, 1.0, 0.005);
  EXPECT_NEAR(fourth / kSamples, 3.0, 0.05);  // the kurtosis: tails as heavy as a normal's
  EXPECT_LE(largest, std::sqrt(-2.0 * std::log(0x1.0p-24)) + 1e-5);
  EXPECT_GT(largest, 4.5);
  EXPECT_LT(ks_distance(v, normal_cdf), ks_limit());
}

TEST(Rng, TruncatedNormalIsANormalOnMinusTwoToTwo) {
  const std::vector<float> v = draw(RngDistribution::kTruncatedNormal, 11, 123, kSamples);
  const double mass = normal_cdf(2.0) - normal_cdf(-2.0);
  for (float x : v) ASSERT_LE(std::fabs(x), 2.0f);
  double sq = 0;
  for (float x : v) sq += double{x} * x;
  EXPECT_NEAR(std::sqrt(sq / kSamples), 0.87962566, 0.003);  // the std models/ divides out
  EXPECT_LT(ks_distance(v, [&](double x) { return (normal_cdf(x) - normal_cdf(-2.0)) / mass; }), ks_limit());
}

TEST(Rng, UniformIsUniformOnZeroToOne) {
  const std::vector<float> v = draw(RngDistribution::kUniform, 3, 99, kSamples);
  for (float x : v) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
  }
  EXPECT_LT(ks_distance(v, [](double x) { return x; }), ks_limit());
  EXPECT_EQ(round_uniform(ir::DType::kBF16, 0.999), 1.0 - 0x1.0p-8);
  EXPECT_LT(round_uniform(ir::DType::kF32, std::nextafter(1.0, 0.0)), 1.0);
}

TEST(Rng, EveryRangeGivesTheSameBitsAsOneElementAtATime) {
  // Vector loop, its tail, a block's redraw list: whatever the range, element e is the same.
  for (RngDistribution dist : {RngDistribution::kUniform, RngDistribution::kNormal, RngDistribution::kTruncatedNormal}) {
    const std::vector<float> whole = draw(dist, 5, 1000, 3000);
    for (int64_t first : {0, 1, 7, 64, 1023, 1500}) {
      for (int64_t count : {1, 3, 16, 17, 37, 1025, 1500}) {
        if (first + count > 3000) continue;
        const std::vector<float> part = draw(dist, 5, 1000 + first, count);
        ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + first, count * sizeof(float)))
            << "elements [" << first << ", " << first + count << ")";
      }
    }
    for (int64_t e : {0, 1, 17, 2999}) {
      const float one = rng_value(dist, 5, 1000 + e);
      EXPECT_EQ(0, std::memcmp(&one, &whole[e], sizeof(float))) << "element " << e;
    }
  }
}

TEST(Rng, SeedsAndNeighbouringElementsAreUncorrelated) {
  const std::vector<float> a = draw(RngDistribution::kNormal, 1, 0, 4096);
  const std::vector<float> b = draw(RngDistribution::kNormal, 2, 0, 4096);
  double across_seeds = 0, neighbours = 0;
  for (int i = 0; i + 1 < 4096; ++i) {
    across_seeds += double{a[i]} * b[i];
    neighbours += double{a[i]} * a[i + 1];
  }
  // Each is a mean of about 4096 products of independent standard normals: sd 1/64.
  EXPECT_LT(std::fabs(across_seeds / 4096), 0.06);
  EXPECT_LT(std::fabs(neighbours / 4096), 0.06);
}

TEST(Rng, ARunOfABlockIsTheSameElementsOfTheWholeArray) {
  // A [4, 6] array split in 2 x 2 blocks of [2, 3]: block (1, 1) sits at rows 2..3, cols 3..5.
  RngBlock block{{4, 6}, {2, 3}};
  std::vector<std::tuple<int64_t, int64_t, int64_t>> runs;
  for_each_global_run(block, {2, 3}, 0, 6, [&](int64_t local, int64_t global, int64_t count) {
    runs.emplace_back(local, global, count);
  });
  EXPECT_EQ(runs, (std::vector<std::tuple<int64_t, int64_t, int64_t>>{{0, 15, 3}, {3, 21, 3}}));
  runs.clear();
  for_each_global_run(block, {2, 3}, 1, 5, [&](int64_t local, int64_t global, int64_t count) {
    runs.emplace_back(local, global, count);
  });
  EXPECT_EQ(runs, (std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 16, 2}, {3, 21, 2}}));
}

}  // namespace
}  // namespace kiln::ops
