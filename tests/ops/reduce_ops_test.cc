// Reductions: shape rules and their error messages, reference evaluation on hand-written
// literals (accumulation in double, NaN propagation, empty reductions), gradient rules on
// hand-computed cases (ties split the gradient equally), dimension maps and costs.
// Finite-difference checks of the gradient rules live in op_table_test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln {
namespace {

using ir::Literal;

std::string reduce_module(std::string_view x, std::string_view result, std::string_view op, std::string_view dims) {
  return fmt::format("module @t\n\nENTRY computation @main {{\n  %x = {} parameter(), index=0\n"
                     "  ROOT %r = {} {}(%x), dims={}\n}}\n",
                     x, result, op, dims);
}

Literal lit(std::string_view shape, std::vector<double> values) {
  auto s = ir::parse_shape(shape);
  KILN_CHECK_OK(s);
  return Literal(*s, std::move(values));
}

std::vector<double> iota(int n, double from = 0) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

std::unique_ptr<ir::Module> parse_verified(const std::string& text) {
  auto m = ir::parse_module(text);
  KILN_CHECK_OK(m);
  Status s = ops::verify(**m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return std::move(*m);
}

// The reduction's reference evaluation: `op` over `dims` of x, declared as `result`.
Literal reduce(std::string_view op, const Literal& x, std::string_view result, std::string_view dims) {
  auto m = parse_verified(reduce_module(x.shape().to_string(), result, op, dims));
  const ir::Instr* root = m->entry()->root();
  std::vector<const Literal*> operands = {&x};
  return ops::op_def(root->opcode()).eval(*root, operands);
}

// The gradient rule applied to `dout`, evaluated with the interpreter.
Literal reduce_vjp(std::string_view op, const Literal& x, const Literal& dout, std::string_view dims) {
  auto m = parse_verified(reduce_module(x.shape().to_string(), dout.shape().to_string(), op, dims));
  ir::Computation* c = m->entry();
  ops::Builder b(c);
  ir::Instr* g = b.parameter(1, dout.shape(), "dout");
  ops::VjpContext ctx{b, c->root(), {g}};
  std::vector<ir::Instr*> grads = ops::op_def(c->root()->opcode()).vjp(ctx);
  KILN_CHECK(grads.size() == 1 && grads[0]);
  c->set_root(grads[0]);
  Status s = ops::verify(*m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<Literal> args = {x, dout};
  auto values = interp::run(*m, args);
  KILN_CHECK_OK(values);
  return (*values)[0];
}

std::string verify_message(const std::string& text) {
  auto m = ir::parse_module(text);
  KILN_CHECK_OK(m);
  Status s = ops::verify(**m);
  return s.ok() ? "ok" : s.message();
}

#define EXPECT_SHAPE_ERROR(text, substring)                                        \
  do {                                                                             \
    std::string msg_ = verify_message(text);                                       \
    EXPECT_NE(msg_.find(substring), std::string::npos) << "message was: " << msg_; \
  } while (0)

TEST(ReduceSum, OverSeveralDims) {
  // x[a][b][c] = 12a + 4b + c; sum over a, c = 8 * 4b + 4 * (0 + 12) + 2 * (0 + 1 + 2 + 3) = 60 + 32b.
  EXPECT_EQ(reduce("reduce_sum", lit("f32[2,3,4]", iota(24)), "f32[3]", "{0,2}"), lit("f32[3]", {60, 92, 124}));
  EXPECT_EQ(reduce("reduce_sum", lit("f32[2,3,4]", iota(24)), "f32[2,4]", "{1}"),
            lit("f32[2,4]", {12, 15, 18, 21, 48, 51, 54, 57}));
}

TEST(ReduceSum, OverAllDimsGivesAScalar) {
  EXPECT_EQ(reduce("reduce_sum", lit("f32[2,3]", iota(6, 1)), "f32[]", "{0,1}"), lit("f32[]", {21}));
  EXPECT_EQ(reduce("reduce_sum", lit("s32[2,3]", {1, -2, 3, 4, 5, -6}), "s32[]", "{1,0}"), lit("s32[]", {5}));
}

TEST(ReduceSum, NoDimsIsTheIdentity) {
  EXPECT_EQ(reduce("reduce_sum", lit("f32[2]", {1.5, 2}), "f32[2]", "{}"), lit("f32[2]", {1.5, 2}));
}

TEST(ReduceSum, AccumulatesInDoubleAndRoundsOnce) {
  // In float32, 1e8 + 1 rounds back to 1e8 and the 1 is lost; in double it survives.
  EXPECT_EQ(reduce("reduce_sum", lit("f32[3]", {1e8, 1, -1e8}), "f32[]", "{0}"), lit("f32[]", {1}));
  // bf16 has 8 significant bits: adding ones in bf16 stalls at 256 (257 rounds to 256), but
  // 300 is representable and the double accumulator reaches it.
  EXPECT_EQ(reduce("reduce_sum", lit("bf16[300]", std::vector<double>(300, 1.0)), "bf16[]", "{0}"), lit("bf16[]", {300}));
}

TEST(ReduceSum, EmptyReductionIsZero) {
  EXPECT_EQ(reduce("reduce_sum", lit("f32[0,3]", {}), "f32[3]", "{0}"), lit("f32[3]", {0, 0, 0}));
}

TEST(ReduceSum, GradientBroadcastsBack) {
  EXPECT_EQ(reduce_vjp("reduce_sum", lit("f32[2,3,2]", iota(12)), lit("f32[3]", {1, 2, 3}), "{0,2}"),
            lit("f32[2,3,2]", {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(reduce_vjp("reduce_sum", lit("f32[2,2]", iota(4)), lit("f32[]", {5}), "{0,1}"),
            lit("f32[2,2]", {5, 5, 5, 5}));
}

TEST(ReduceMaxMin, PickExtremes) {
  Literal x = lit("f32[2,3]", {1, 5, 2, -1, -7, -3});
  EXPECT_EQ(reduce("reduce_max", x, "f32[2]", "{1}"), lit("f32[2]", {5, -1}));
  EXPECT_EQ(reduce("reduce_min", x, "f32[2]", "{1}"), lit("f32[2]", {1, -7}));
  EXPECT_EQ(reduce("reduce_max", x, "f32[3]", "{0}"), lit("f32[3]", {1, 5, 2}));
  EXPECT_EQ(reduce("reduce_min", x, "f32[]", "{0,1}"), lit("f32[]", {-7}));
  EXPECT_EQ(reduce("reduce_max", lit("s32[3]", {-4, 9, 2}), "s32[]", "{0}"), lit("s32[]", {9}));
}

TEST(ReduceMaxMin, PropagateNaN) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Literal x = lit("f32[2,2]", {1, nan, nan, 2});
  EXPECT_TRUE(std::isnan(reduce("reduce_max", x, "f32[2]", "{1}").at(0)));
  EXPECT_TRUE(std::isnan(reduce("reduce_min", x, "f32[2]", "{1}").at(1)));
  EXPECT_TRUE(std::isnan(reduce("reduce_max", lit("f32[2]", {nan, 3}), "f32[]", "{0}").at(0)));
}

TEST(ReduceMaxMin, EmptyReductionGivesTheIdentity) {
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reduce("reduce_max", lit("f32[0,2]", {}), "f32[2]", "{0}"), lit("f32[2]", {-inf, -inf}));
  EXPECT_EQ(reduce("reduce_min", lit("f32[0,2]", {}), "f32[2]", "{0}"), lit("f32[2]", {inf, inf}));
  EXPECT_EQ(reduce("reduce_max", lit("s32[0]", {}), "s32[]", "{0}"), lit("s32[]", {-2147483648.0}));
}

TEST(ReduceMaxMin, GradientGoesToTheExtremeAndSplitsTies) {
  // Row 0: max 3 tied twice -> 1/2 each; row 1: max 5 tied three times -> 6/3 each.
  Literal x = lit("f32[2,4]", {1, 3, 3, 2, 5, 0, 5, 5});
  EXPECT_EQ(reduce_vjp("reduce_max", x, lit("f32[2]", {1, 6}), "{1}"), lit("f32[2,4]", {0, 0.5, 0.5, 0, 2, 0, 2, 2}));
  // Min: each row has a single minimum (1 and 0), which takes the whole gradient.
  EXPECT_EQ(reduce_vjp("reduce_min", x, lit("f32[2]", {4, 6}), "{1}"), lit("f32[2,4]", {4, 0, 0, 0, 0, 6, 0, 0}));
  // Over all dims: 5 appears three times.
  EXPECT_EQ(reduce_vjp("reduce_max", x, lit("f32[]", {3}), "{0,1}"), lit("f32[2,4]", {0, 0, 0, 0, 1, 0, 1, 1}));
  // Over several dims of a rank-3 operand.
  // Middle index 0 sees {1, 4, 0, 4}: max 4, tied twice; middle index 1 sees {2, 4, 3, -1}.
  Literal y = lit("f32[2,2,2]", {1, 4, 2, 4, 0, 4, 3, -1});
  EXPECT_EQ(reduce_vjp("reduce_max", y, lit("f32[2]", {3, 1}), "{0,2}"),
            lit("f32[2,2,2]", {0, 1.5, 0, 1, 0, 1.5, 0, 0}));
}

TEST(Reduce, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR(reduce_module("f32[2,3]", "f32[2]", "reduce_sum", "{2}"),
                     "reduce_sum dims has dimension 2 outside [0, 2); dims={2} must be distinct dimensions of f32[2,3]");
  EXPECT_SHAPE_ERROR(reduce_module("f32[2,3]", "f32[2]", "reduce_max", "{1,1}"), "reduce_max dims repeats dimension 1");
  EXPECT_SHAPE_ERROR(reduce_module("f32[2,3]", "f32[2]", "reduce_min", "{-1}"), "outside [0, 2)");
  EXPECT_SHAPE_ERROR(reduce_module("pred[2,3]", "pred[2]", "reduce_max", "{1}"),
                     "reduce_max needs a numeric operand, got pred[2,3] (convert pred to s32 first)");
  EXPECT_SHAPE_ERROR(reduce_module("f32[2,3]", "f32[3]", "reduce_sum", "{1}"),
                     "reduce_sum result is f32[2] but f32[3] was declared");
  EXPECT_SHAPE_ERROR(reduce_module("f32[2,3]", "f32[2]", "reduce_sum", "1"), "reduce_sum attribute 'dims' must be");
  EXPECT_SHAPE_ERROR(
      "module @t\n\nENTRY computation @main {\n  %x = f32[2] parameter(), index=0\n"
      "  ROOT %r = f32[] reduce_sum(%x, %x), dims={0}\n}\n",
      "reduce_sum takes 1 operands, got 2");
}

TEST(Reduce, DimMapDropsReducedDimsAndCostCountsInputElements) {
  for (const char* op : {"reduce_sum", "reduce_max", "reduce_min"}) {
    auto m = parse_verified(reduce_module("f32[2,3,4]", "f32[3]", op, "{0,2}"));
    const ir::Instr& r = *m->entry()->root();
    EXPECT_EQ(ops::op_def(r.opcode()).dim_map(r), (std::vector<std::vector<int>>{{-1, 0, -1}})) << op;
    ops::Cost cost = ops::cost_of(r);
    EXPECT_EQ(cost.flops, 24) << op;
    EXPECT_EQ(cost.bytes_read, 24 * 4) << op;
    EXPECT_EQ(cost.bytes_written, 3 * 4) << op;
  }
}

}  // namespace
}  // namespace kiln
