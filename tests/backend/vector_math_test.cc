// The generated kernels' own exp (kiln_exp in the kernel prelude, a float polynomial that
// vectorizes) and by-value min/max, against the interpreter (exp in double, rounded once to
// f32) over exp's whole float range: overflow, denormals, underflow to zero, inf and NaN.
// Tolerance: 2 f32 ulps of the exact value (the polynomial is within 1 ulp; the division in
// logistic adds one rounding); results below the smallest normal float may be anything down
// to 0 (logistic(-102) is 1 / (1 + exp(102)) = 1 / inf in float arithmetic, as with std::exp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/backend/backend.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"

namespace kiln::backend {
namespace {

constexpr double kMinNormal = std::numeric_limits<float>::min();

TEST(VectorMath, GeneratedExpLogisticMinMaxEqualTheInterpreter) {
  const int64_t n = 40000;
  const std::string dims = "[" + std::to_string(n) + "]";
  auto module = ir::parse_module(
      "module @t\n\nENTRY computation @main {\n"
      "  %x = f32" + dims + " parameter(), index=0\n"
      "  %y = f32" + dims + " parameter(), index=1\n"
      "  %e = f32" + dims + " exp(%x)\n"
      "  %l = f32" + dims + " logistic(%x)\n"
      "  %lo = f32" + dims + " min(%x, %y)\n"
      "  %hi = f32" + dims + " max(%x, %y)\n"
      "  %c = f32" + dims + " clamp(%y, %x, %hi)\n"
      "  ROOT %r = (f32" + dims + ", f32" + dims + ", f32" + dims + ", f32" + dims + ", f32" + dims +
      ") tuple(%e, %l, %lo, %hi, %c)\n}\n");
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  std::vector<double> xs(n), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    xs[i] = -110.0 + 200.0 * static_cast<double>(i) / static_cast<double>(n - 8);  // -110 .. 90
    ys[i] = std::sin(static_cast<double>(i)) * 50.0;
  }
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const double special[8] = {inf, -inf, nan, 0.0, -0.0, 88.72, -87.3, -103.9};
  for (int k = 0; k < 8; ++k) xs[n - 8 + k] = special[k];
  ir::Literal x(ir::Shape(ir::DType::kF32, {n}), xs), y(ir::Shape(ir::DType::kF32, {n}), ys);
  CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_vector_math_cache";
  auto exe = compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<ir::Literal> args = {x, y};
  auto want = interp::run(**module, args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = (*exe)->run(std::vector<Buffer>{Buffer::from_literal(x), Buffer::from_literal(y)});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), want->size());
  for (size_t o = 0; o < want->size(); ++o) {
    for (int64_t i = 0; i < n; ++i) {
      const double w = (*want)[o].at(i), g = (*got)[o].get(i);
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << "output " << o << " at x = " << xs[i];
        continue;
      }
      const float wf = static_cast<float>(w);
      if (std::isinf(wf)) {
        EXPECT_EQ(g, wf) << "output " << o << " at x = " << xs[i];
        continue;
      }
      const float finf = std::numeric_limits<float>::infinity();
      const double ulp = std::nextafter(std::fabs(wf), finf) - std::fabs(wf);
      ASSERT_NEAR(g, w, 2 * ulp + (std::fabs(w) < kMinNormal ? kMinNormal : 0.0)) << "output " << o << " at x = " << xs[i];
    }
  }
}

}  // namespace
}  // namespace kiln::backend
