// sort and topk along the last dimension: shape rules, reference evaluation (ties, NaN,
// several rows), gradient rule, cost and dimension maps.
#include <gtest/gtest.h>

#include "tests/testing/ir_eval.h"

#include <cmath>
#include <limits>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln {
namespace ir {
// Failure messages show the literal's shape and values.
void PrintTo(const Literal& literal, std::ostream* os) { *os << literal.to_string(); }
}  // namespace ir
namespace {

using ir::Literal;
using ir::Shape;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Shape shape_of(const std::string& text) {
  auto s = ir::parse_shape(text);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

Literal lit(const std::string& shape, std::vector<double> values) { return Literal(shape_of(shape), std::move(values)); }

// A module whose root is the op's (values, indices) tuple.
std::string op_module(const std::string& x, const std::string& result, const std::string& op_and_attrs) {
  return "module @t\n\nENTRY computation @main {\n  %x = " + x + " parameter(), index=0\n  ROOT %t = " + result + " " +
         op_and_attrs + "\n}\n";
}

// Runs the module; returns {values, indices}.
std::vector<Literal> run(const std::string& text, Literal x) { return testing::run_module_outputs(text, {std::move(x)}); }

using testing::verify_error;

// ---- sort ----

TEST(Sort, AscendingIsStableUnderTies) {
  auto r = run(op_module("f32[2,4]", "(f32[2,4], s32[2,4])", "sort(%x), descending=0"),
               lit("f32[2,4]", {3, 1, 2, 1, 0, -1, 5, -1}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], lit("f32[2,4]", {1, 1, 2, 3, -1, -1, 0, 5}));
  EXPECT_EQ(r[1], lit("s32[2,4]", {1, 3, 2, 0, 1, 3, 0, 2}));
}

TEST(Sort, DescendingIsStableUnderTies) {
  auto r = run(op_module("f32[2,4]", "(f32[2,4], s32[2,4])", "sort(%x), descending=1"),
               lit("f32[2,4]", {3, 1, 2, 1, 0, -1, 5, -1}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], lit("f32[2,4]", {3, 2, 1, 1, 5, 0, -1, -1}));
  EXPECT_EQ(r[1], lit("s32[2,4]", {0, 2, 1, 3, 2, 0, 1, 3}));
}

TEST(Sort, DescendingDefaultsToAscending) {
  auto r = run(op_module("s32[3]", "(s32[3], s32[3])", "sort(%x)"), lit("s32[3]", {2, -7, 0}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], lit("s32[3]", {-7, 0, 2}));
  EXPECT_EQ(r[1], lit("s32[3]", {1, 2, 0}));
}

TEST(Sort, NanOrdersAboveInfinity) {
  auto up = run(op_module("f32[4]", "(f32[4], s32[4])", "sort(%x), descending=0"), lit("f32[4]", {1, kNaN, -kInf, kInf}));
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(up[0], lit("f32[4]", {-kInf, 1, kInf, kNaN}));
  EXPECT_EQ(up[1], lit("s32[4]", {2, 0, 3, 1}));
  auto down = run(op_module("f32[4]", "(f32[4], s32[4])", "sort(%x), descending=1"), lit("f32[4]", {1, kNaN, -kInf, kInf}));
  ASSERT_EQ(down.size(), 2u);
  EXPECT_EQ(down[1], lit("s32[4]", {1, 3, 0, 2}));
}

TEST(Sort, SortsEveryRowOfARank3Operand) {
  auto r = run(op_module("f32[2,2,2]", "(f32[2,2,2], s32[2,2,2])", "sort(%x), descending=0"),
               lit("f32[2,2,2]", {2, 1, 1, 2, 0, 0, -1, -2}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], lit("f32[2,2,2]", {1, 2, 1, 2, 0, 0, -2, -1}));
  EXPECT_EQ(r[1], lit("s32[2,2,2]", {1, 0, 0, 1, 0, 1, 1, 0}));
}

TEST(Sort, RejectsScalarsPredAndBadDescending) {
  std::string e = verify_error(op_module("f32[]", "(f32[], s32[])", "sort(%x), descending=0"));
  EXPECT_NE(e.find("sort works along the last dimension; it needs rank >= 1, got f32[]"), std::string::npos) << e;
  e = verify_error(op_module("pred[3]", "(pred[3], s32[3])", "sort(%x), descending=0"));
  EXPECT_NE(e.find("sort needs a numeric operand, got pred[3]"), std::string::npos) << e;
  e = verify_error(op_module("f32[3]", "(f32[3], s32[3])", "sort(%x), descending=2"));
  EXPECT_NE(e.find("sort descending=2 must be 0 or 1"), std::string::npos) << e;
  e = verify_error(op_module("f32[3]", "(f32[3], u32[3])", "sort(%x), descending=0"));
  EXPECT_NE(e.find("but (f32[3], u32[3]) was declared"), std::string::npos) << e;
}

// ---- topk ----

TEST(TopK, PicksLargestInDescendingOrderAndLowerIndexOnTies) {
  auto r = run(op_module("f32[2,5]", "(f32[2,3], s32[2,3])", "topk(%x), k=3"),
               lit("f32[2,5]", {1, 3, 3, 0, 2, 5, 5, 1, 5, 0}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], lit("f32[2,3]", {3, 3, 2, 5, 5, 5}));
  EXPECT_EQ(r[1], lit("s32[2,3]", {1, 2, 4, 0, 1, 3}));
}

TEST(TopK, KEqualToTheDimensionIsAStableDescendingSort) {
  auto r = run(op_module("f32[5]", "(f32[5], s32[5])", "topk(%x), k=5"), lit("f32[5]", {2, -1, 2, 7, -1}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], lit("f32[5]", {7, 2, 2, -1, -1}));
  EXPECT_EQ(r[1], lit("s32[5]", {3, 0, 2, 1, 4}));
}

TEST(TopK, NanIsPickedFirst) {
  auto r = run(op_module("f32[4]", "(f32[2], s32[2])", "topk(%x), k=2"), lit("f32[4]", {1, kInf, kNaN, 3}));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1], lit("s32[2]", {2, 1}));
}

TEST(TopK, RejectsKOutsideTheLastDimension) {
  std::string e = verify_error(op_module("f32[2,4]", "(f32[2,0], s32[2,0])", "topk(%x), k=0"));
  EXPECT_NE(e.find("topk k=0 must be in [1, 4] (the last dimension of f32[2,4])"), std::string::npos) << e;
  e = verify_error(op_module("f32[2,4]", "(f32[2,5], s32[2,5])", "topk(%x), k=5"));
  EXPECT_NE(e.find("topk k=5 must be in [1, 4]"), std::string::npos) << e;
  e = verify_error(op_module("f32[2,4]", "(f32[2,2], s32[2,2])", "topk(%x)"));
  EXPECT_NE(e.find("topk needs attribute 'k'"), std::string::npos) << e;
  e = verify_error(op_module("f32[2,4]", "(f32[2,4], s32[2,4])", "topk(%x), k=2"));
  EXPECT_NE(e.find("result is (f32[2,2], s32[2,2])"), std::string::npos) << e;
}

// ---- gradient rule ----

// Applies the root op's gradient rule with dvalues = g (dindices not given) and evaluates it.
Literal vjp_of(const std::string& forward, const Literal& x, const Literal& g) {
  auto parsed = ir::parse_module(forward);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  ir::Module& m = **parsed;
  ir::Computation* c = m.entry();
  ops::Builder b(c);
  ir::Instr* op = c->root();
  ir::Instr* gp = b.parameter(1, g.shape());
  ops::VjpContext ctx{b, op, {gp, nullptr}};
  std::vector<ir::Instr*> grads = ops::op_def(op->opcode()).vjp(ctx);
  EXPECT_EQ(grads.size(), 1u);
  if (grads.size() != 1 || !grads[0]) return Literal();
  c->set_root(grads[0]);
  Status v = ops::verify(m);
  EXPECT_TRUE(v.ok()) << v.to_string();
  std::vector<Literal> args = {x, g};
  auto r = interp::run(m, args);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? (*r)[0] : Literal();
}

TEST(Sort, GradientReturnsEachValueGradientToItsSourcePosition) {
  // Descending order of {3, 1, 2, 1} is indices {0, 2, 1, 3}.
  Literal dx = vjp_of(op_module("f32[4]", "(f32[4], s32[4])", "sort(%x), descending=1"), lit("f32[4]", {3, 1, 2, 1}),
                      lit("f32[4]", {10, 20, 30, 40}));
  EXPECT_EQ(dx, lit("f32[4]", {10, 30, 20, 40}));
}

TEST(TopK, GradientIsZeroAtUnselectedPositions) {
  Literal dx = vjp_of(op_module("f32[2,3]", "(f32[2,2], s32[2,2])", "topk(%x), k=2"), lit("f32[2,3]", {1, 3, 2, 0, -1, 4}),
                      lit("f32[2,2]", {10, 20, 30, 40}));
  // Row 0 picks {1, 2}; row 1 picks {2, 0}.
  EXPECT_EQ(dx, lit("f32[2,3]", {0, 10, 20, 40, 0, 30}));
}

// ---- cost and sharding rule ----

TEST(TopK, DimMapDropsTheLastDimensionButSortKeepsIt) {
  auto t = ir::parse_module(op_module("f32[3,8]", "(f32[3,2], s32[3,2])", "topk(%x), k=2"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(ops::op_def(ir::Opcode::kTopK).dim_map(*(*t)->entry()->root()), (std::vector<std::vector<int>>{{0, -1}}));
  auto s = ir::parse_module(op_module("f32[3,8]", "(f32[3,8], s32[3,8])", "sort(%x), descending=0"));
  ASSERT_TRUE(s.ok());
  const ir::Instr* sort = (*s)->entry()->root();
  EXPECT_EQ(ops::op_def(ir::Opcode::kSort).dim_map(*sort), (std::vector<std::vector<int>>{{0, 1}}));
  ops::Cost c = ops::cost_of(*sort);
  EXPECT_EQ(c.flops, 3.0 * 8 * 3);  // n log2 n comparisons per row
  EXPECT_EQ(c.bytes_read, 4.0 * 24);
  EXPECT_EQ(c.bytes_written, 4.0 * 24 + 4.0 * 24);
}

}  // namespace
}  // namespace kiln
