// The AdamW-with-weight-copy kernel shape, compiled: an f32 value stored, its bf16 copy
// stored, and a reduction over it, all in one input fusion (multi_output_fusion merges the
// copy's multi-output loop fusion into the reduction). Generated code stores a bf16 output
// from its unrounded value (one rounding in kiln_bf16_store); the stored bits must equal the
// interpreter's round-to-nearest-even on ties, overflow to inf, denormals, inf and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kiln/backend/backend.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend {
namespace {

// Fusions as FusionPass leaves them in the step (the copy's convert after the norm), so that
// multi_output_fusion makes the one kernel: %q = a*b is exact-rounded in f32 (no addition for
// FMA contraction to join), %c its bf16 copy, %cc a bf16 op whose float product of two bf16
// values is exact before its one rounding. The compiled bits must equal the interpreter's.
constexpr const char* kModule = R"(module @bf16_outputs

computation @fused.q {
  %q.a = f32[3,1111] parameter(), index=0
  %q.b = f32[3,1111] parameter(), index=1
  ROOT %q.q = f32[3,1111] mul(%q.a, %q.b)
}

computation @fused.norm {
  %norm.q = f32[3,1111] parameter(), index=0
  %norm.qq = f32[3,1111] mul(%norm.q, %norm.q)
  ROOT %norm.r = f32[] reduce_sum(%norm.qq), dims={0,1}
}

computation @fused.copy {
  %copy.q = f32[3,1111] parameter(), index=0
  %copy.c = bf16[3,1111] convert(%copy.q)
  %copy.cc = bf16[3,1111] mul(%copy.c, %copy.c)
  ROOT %copy.t = (bf16[3,1111], bf16[3,1111]) tuple(%copy.c, %copy.cc)
}

ENTRY computation @main {
  %a = f32[3,1111] parameter(), index=0
  %b = f32[3,1111] parameter(), index=1
  %q = f32[3,1111] fusion(%a, %b), kind=loop, calls={@fused.q}
  %n = f32[] fusion(%q), kind=input, calls={@fused.norm}
  %cs = (bf16[3,1111], bf16[3,1111]) fusion(%q), kind=loop, calls={@fused.copy}
  %c = bf16[3,1111] get_tuple_element(%cs), index=0
  %cc = bf16[3,1111] get_tuple_element(%cs), index=1
  ROOT %t = (f32[3,1111], bf16[3,1111], bf16[3,1111], f32[]) tuple(%q, %c, %cc, %n)
}
)";

TEST(FusedBf16Outputs, OneKernelStoresTheSameBitsAsTheInterpreter) {
  auto module = ir::parse_module(kModule);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_backend_cache";
  options.verify_each = true;
  auto exe = compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  // The copy absorbs the product (a multi-output loop fusion), which then merges whole into
  // the reduction: one kernel.
  EXPECT_EQ((*exe)->report().fused_kernels, 1);

  const ir::Shape shape(ir::DType::kF32, {3, 1111});
  std::mt19937_64 rng(7);
  ir::Literal a = testing::random_literal(shape, rng, -3.0, 3.0);
  ir::Literal b = testing::random_literal(shape, rng, -3.0, 3.0);
  // The first elements are the edge cases (b = 1, so q = a): ties to even both ways, values
  // just below and above the midpoint between bf16's largest finite value and inf, f32
  // denormals, infinities, NaN and signed zeros. 3333 elements: the kernel's blocks of 1024,
  // its 16-lane steps and its scalar tail all run.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<double> edges = {1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, -(1.0 + 0x1p-8), 3.395e38, 3.397e38, -3.397e38,
                                     1e-40, -3e-39, 0x1p-133, inf, -inf, std::nan(""), 0.0, -0.0};
  for (size_t i = 0; i < edges.size(); ++i) {
    a.mutable_values()[i] = edges[i];
    b.mutable_values()[i] = 1.0;
  }
  a.round_all();
  // A second run without the edge cases gives a finite norm to compare.
  ir::Literal a_finite = a;
  for (size_t i = 0; i < edges.size(); ++i) a_finite.mutable_values()[i] = 0.5;
  for (const ir::Literal* first : {&a, &a_finite}) {
    std::vector<ir::Literal> args = {*first, b};
    auto want = interp::run(**module, args);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    auto got = (*exe)->run(std::vector<Buffer>{Buffer::from_literal(args[0]), Buffer::from_literal(args[1])});
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), 4u);
    for (int k = 0; k < 3; ++k) {
      ir::Literal g = (*got)[k].to_literal();
      for (int64_t i = 0; i < g.shape().num_elements(); ++i) {
        // Literal's == is bitwise on the doubles, NaN equal to NaN; per element for the message.
        const double x = g.at(i), y = (*want)[k].at(i);
        EXPECT_TRUE((std::isnan(x) && std::isnan(y)) || (std::signbit(x) == std::signbit(y) && x == y))
            << "output " << k << "[" << i << "]: compiled " << x << ", interpreter " << y << " (a = " << args[0].at(i)
            << ")";
      }
    }
    // The norm: a double sum in both, in another order, rounded to f32 (1e-6 is many f32 ulps
    // and far below any real error); NaN in the first run.
    const double n = (*got)[3].get(0), want_n = (*want)[3].at(0);
    if (std::isnan(want_n)) {
      EXPECT_TRUE(std::isnan(n));
    } else {
      EXPECT_NEAR(n, want_n, 1e-6 * std::fabs(want_n));
    }
  }
}

}  // namespace
}  // namespace kiln::backend
