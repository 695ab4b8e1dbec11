// grouped_matmul / grouped_matmul_weight_grad: the reference evaluation against per-group
// dot_general, and the CPU kernels (tiled over rows, columns and K) against the reference
// on shapes larger than one tile, with empty groups, a dominant group and padding rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ops/builder.h"
#include "tests/testing/random_literals.h"

namespace kiln::ops {
namespace {

using ir::Literal;

// Row r of group g of a [M, K] x [G, K, N] product, computed directly.
double expected_gmm(const Literal& x, const Literal& w, const std::vector<double>& sizes, bool transpose, int64_t r,
                    int64_t n) {
  int64_t K = x.shape().dim(1), N = transpose ? w.shape().dim(1) : w.shape().dim(2);
  int64_t at = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    if (r >= at && r < at + static_cast<int64_t>(sizes[g])) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += x.at(r * K + k) * (transpose ? w.at((g * N + n) * K + k) : w.at((g * K + k) * N + n));
      }
      return acc;
    }
    at += static_cast<int64_t>(sizes[g]);
  }
  return 0.0;  // padding row
}

struct Case {
  int64_t M, K, N;
  std::vector<double> sizes;
  bool transpose;
};

// Builds out = (gmm(x, w, sizes), tgmm(x, dy, sizes)); runs it in the interpreter and on
// the CPU backend.
void check_case(const Case& c) {
  int64_t G = static_cast<int64_t>(c.sizes.size());
  auto module = std::make_unique<ir::Module>("gmm");
  ir::Computation* comp = module->add_computation("main");
  module->set_entry(comp);
  Builder b(comp);
  Instr* x = b.parameter(0, Shape(DType::kF32, {c.M, c.K}));
  Instr* w = b.parameter(1, Shape(DType::kF32, c.transpose ? std::vector<int64_t>{G, c.N, c.K}
                                                           : std::vector<int64_t>{G, c.K, c.N}));
  Instr* dy = b.parameter(2, Shape(DType::kF32, {c.M, c.N}));
  Instr* sizes = b.constant(Literal(Shape(DType::kS32, {G}), c.sizes));
  comp->set_root(b.tuple({b.grouped_matmul(x, w, sizes, c.transpose), b.grouped_matmul_weight_grad(x, dy, sizes)}));
  std::mt19937_64 rng(3);
  std::vector<Literal> args = {testing::random_literal(x->shape(), rng, -1, 1),
                               testing::random_literal(w->shape(), rng, -1, 1),
                               testing::random_literal(dy->shape(), rng, -1, 1)};
  auto want = interp::run(*module, args);
  KILN_CHECK_OK(want);
  // The reference itself, at a few rows (first, last, group edges, padding).
  for (int64_t r : {int64_t{0}, c.M / 2, c.M - 1}) {
    for (int64_t n : {int64_t{0}, c.N - 1}) {
      EXPECT_NEAR((*want)[0].at(r * c.N + n), expected_gmm(args[0], args[1], c.sizes, c.transpose, r, n), 1e-3);
    }
  }
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_gmm_cache";
  auto exe = backend::compile_cpu(*module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->report().fallback_kernels, 0);
  std::vector<backend::Buffer> inputs;
  for (const Literal& a : args) inputs.push_back(backend::Buffer::from_literal(a));
  auto got = (*exe)->run(inputs);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (int i = 0; i < 2; ++i) {
    const Literal& wl = (*want)[i];
    for (int64_t j = 0; j < wl.shape().num_elements(); ++j) {
      // f32 sums of up to a few hundred products of magnitude <= 1 in another order.
      ASSERT_NEAR((*got)[i].get(j), wl.at(j), 1e-4 * (1.0 + std::fabs(wl.at(j)))) << "output " << i << " [" << j << "]";
    }
  }
}

TEST(GroupedMatmul, KernelsEqualReferenceAcrossTiles) {
  // Groups larger than a tile (256 rows), empty groups, padding rows, N and K over a tile.
  check_case({700, 300, 520, {0, 300, 1, 290, 0}, false});
  check_case({700, 300, 520, {0, 300, 1, 290, 0}, true});
  // One group holds every row.
  check_case({600, 64, 300, {0, 0, 600}, false});
  // Sizes past M: the last group is cut.
  check_case({300, 40, 40, {200, 200}, true});
}

}  // namespace
}  // namespace kiln::ops
