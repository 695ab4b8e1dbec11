// gather and scatter_add: shape rules, reference evaluation (clamped gather indices, skipped
// scatter indices, duplicates accumulating), gradient rules, cost and dimension maps.
#include <gtest/gtest.h>

#include "tests/testing/ir_eval.h"

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

Shape shape_of(const std::string& text) {
  auto s = ir::parse_shape(text);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

Literal lit(const std::string& shape, std::vector<double> values) { return Literal(shape_of(shape), std::move(values)); }

std::string gather_module(const std::string& x, const std::string& idx, const std::string& out, const std::string& attrs) {
  return "module @t\n\nENTRY computation @main {\n  %x = " + x + " parameter(), index=0\n  %i = " + idx +
         " parameter(), index=1\n  ROOT %g = " + out + " gather(%x, %i), " + attrs + "\n}\n";
}

std::string scatter_module(const std::string& x, const std::string& idx, const std::string& updates, const std::string& attrs) {
  return "module @t\n\nENTRY computation @main {\n  %x = " + x + " parameter(), index=0\n  %i = " + idx +
         " parameter(), index=1\n  %u = " + updates + " parameter(), index=2\n  ROOT %s = " + x +
         " scatter_add(%x, %i, %u), " + attrs + "\n}\n";
}

Literal run(const std::string& text, std::vector<Literal> args) { return testing::run_module(text, args); }

using testing::verify_error;

// ---- gather ----

TEST(Gather, EmbeddingLookupClampsOutOfRangeIndices) {
  Literal table = lit("f32[4,2]", {0, 1, 10, 11, 20, 21, 30, 31});
  Literal tokens = lit("s32[2,2]", {3, 0, -1, 7});  // -1 -> 0, 7 -> 3
  Literal out = run(gather_module("f32[4,2]", "s32[2,2]", "f32[2,2,2]", "axis=0, batch_dims=0"), {table, tokens});
  EXPECT_EQ(out, lit("f32[2,2,2]", {30, 31, 0, 1, 0, 1, 30, 31}));
}

TEST(Gather, TakeAlongAxisWithOneBatchDim) {
  Literal x = lit("f32[2,3]", {1, 2, 3, 4, 5, 6});
  Literal idx = lit("s32[2,2]", {2, 0, 1, 1});
  Literal out = run(gather_module("f32[2,3]", "s32[2,2]", "f32[2,2]", "axis=1, batch_dims=1"), {x, idx});
  EXPECT_EQ(out, lit("f32[2,2]", {3, 1, 5, 5}));
}

TEST(Gather, MiddleAxisKeepsDimsOnBothSides) {
  // x[a,j,q] = 6a + 2j + q; idx {2, 0} along axis 1.
  Literal x = lit("f32[2,3,2]", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Literal idx = lit("u32[2]", {2, 0});
  Literal out = run(gather_module("f32[2,3,2]", "u32[2]", "f32[2,2,2]", "axis=1"), {x, idx});
  EXPECT_EQ(out, lit("f32[2,2,2]", {4, 5, 0, 1, 10, 11, 6, 7}));
}

TEST(Gather, BatchDimWithAnotherDimBeforeTheAxis) {
  // x[b,p,n] = 6b + 3p + n; batch 0 takes n=2, batch 1 takes n=0, for every p.
  Literal x = lit("f32[2,2,3]", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Literal idx = lit("s32[2,1]", {2, 0});
  Literal out = run(gather_module("f32[2,2,3]", "s32[2,1]", "f32[2,2,1]", "axis=2, batch_dims=1"), {x, idx});
  EXPECT_EQ(out, lit("f32[2,2,1]", {2, 5, 6, 9}));
}

TEST(Gather, LargeUnsignedIndexClampsToTheLastRow) {
  Literal out = run(gather_module("f32[3]", "u32[2]", "f32[2]", "axis=0"), {lit("f32[3]", {7, 8, 9}), lit("u32[2]", {4000000000.0, 1})});
  EXPECT_EQ(out, lit("f32[2]", {9, 8}));
}

TEST(Gather, ScalarIndexDropsTheAxis) {
  Literal out = run(gather_module("f32[2,3]", "s32[]", "f32[2]", "axis=1"), {lit("f32[2,3]", {1, 2, 3, 4, 5, 6}), lit("s32[]", {1})});
  EXPECT_EQ(out, lit("f32[2]", {2, 5}));
}

TEST(Gather, RejectsBadIndicesAndAxes) {
  std::string e = verify_error(gather_module("f32[4,2]", "f32[3]", "f32[3,2]", "axis=0"));
  EXPECT_NE(e.find("gather indices must be s32 or u32, got f32[3]"), std::string::npos) << e;
  e = verify_error(gather_module("f32[4,2]", "s32[3]", "f32[3,2]", "axis=2"));
  EXPECT_NE(e.find("axis=2 must be in [batch_dims=0, 2)"), std::string::npos) << e;
  e = verify_error(gather_module("f32[4,2]", "s32[4,1]", "f32[4,1]", "axis=0, batch_dims=1"));
  EXPECT_NE(e.find("axis=0 must be in [batch_dims=1, 2)"), std::string::npos) << e;
  e = verify_error(gather_module("f32[4,2]", "s32[3]", "f32[3]", "axis=1, batch_dims=2"));
  EXPECT_NE(e.find("batch_dims=2 must be in [0, 1]"), std::string::npos) << e;
  e = verify_error(gather_module("f32[4,3]", "s32[5,2]", "f32[4,2]", "axis=1, batch_dims=1"));
  EXPECT_NE(e.find("batch dim 0 differs: operand f32[4,3] has 4 but indices s32[5,2] have 5"), std::string::npos) << e;
  e = verify_error(gather_module("f32[4,2]", "s32[3]", "f32[2,3]", "axis=0"));
  EXPECT_NE(e.find("result is f32[3,2] but f32[2,3] was declared"), std::string::npos) << e;
  e = verify_error(gather_module("f32[4,2]", "s32[3]", "f32[3,2]", "dim=0"));
  EXPECT_NE(e.find("needs attribute 'axis'"), std::string::npos) << e;
}

// ---- scatter_add ----

TEST(ScatterAdd, DuplicatesAccumulateAndOutOfRangeIndicesAreSkipped) {
  Literal x = lit("f32[3,2]", {1, 1, 1, 1, 1, 1});
  Literal idx = lit("s32[5]", {2, 0, 2, -1, 3});  // -1 and 3 are skipped, 2 twice
  Literal updates = lit("f32[5,2]", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  Literal out = run(scatter_module("f32[3,2]", "s32[5]", "f32[5,2]", "axis=0"), {x, idx, updates});
  EXPECT_EQ(out, lit("f32[3,2]", {4, 5, 1, 1, 7, 9}));
}

TEST(ScatterAdd, TakeAlongAxisAdjoint) {
  Literal x = lit("f32[2,3]", {0, 0, 0, 0, 0, 0});
  Literal idx = lit("s32[2,2]", {1, 1, 0, 2});
  Literal updates = lit("f32[2,2]", {1, 2, 3, 4});
  Literal out = run(scatter_module("f32[2,3]", "s32[2,2]", "f32[2,2]", "axis=1, batch_dims=1"), {x, idx, updates});
  EXPECT_EQ(out, lit("f32[2,3]", {0, 3, 0, 3, 0, 4}));
}

TEST(ScatterAdd, UnsignedIndicesPastTheEndAreSkipped) {
  Literal out = run(scatter_module("f32[2]", "u32[3]", "f32[3]", "axis=0"),
                    {lit("f32[2]", {10, 20}), lit("u32[3]", {1, 4000000000.0, 2}), lit("f32[3]", {1, 2, 3})});
  EXPECT_EQ(out, lit("f32[2]", {10, 21}));
}

TEST(ScatterAdd, RejectsUpdatesNotShapedLikeTheGather) {
  std::string e = verify_error(scatter_module("f32[4,2]", "s32[3]", "f32[2,3]", "axis=0"));
  EXPECT_NE(e.find("scatter_add updates must be f32[3,2]"), std::string::npos) << e;
  e = verify_error(scatter_module("f32[4,2]", "s32[3]", "bf16[3,2]", "axis=0"));
  EXPECT_NE(e.find("got bf16[3,2]"), std::string::npos) << e;
  e = verify_error(scatter_module("f32[4,2]", "s32[3]", "f32[3,2]", "axis=0, batch=1"));
  EXPECT_NE(e.find("scatter_add has no attribute 'batch'; accepted: axis, batch_dims"), std::string::npos) << e;
}

// ---- gradient rules ----

// Applies `op`'s gradient rule with output gradient g (parameter `g_shape`) and evaluates the
// non-null gradients by the interpreter.
std::vector<Literal> vjp_of(const std::string& forward, std::vector<Literal> args, const Literal& g, int expected_grads,
                            std::vector<bool>* present) {
  auto parsed = ir::parse_module(forward);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  ir::Module& m = **parsed;
  ir::Computation* c = m.entry();
  ops::Builder b(c);
  ir::Instr* op = c->root();
  ir::Instr* gp = b.parameter(static_cast<int>(args.size()), g.shape());
  ops::VjpContext ctx{b, op, {gp}};
  std::vector<ir::Instr*> grads = ops::op_def(op->opcode()).vjp(ctx);
  EXPECT_EQ(static_cast<int>(grads.size()), expected_grads);
  std::vector<ir::Instr*> present_grads;
  for (ir::Instr* gi : grads) {
    present->push_back(gi != nullptr);
    if (gi) present_grads.push_back(gi);
  }
  c->set_root(b.tuple(present_grads));
  Status v = ops::verify(m);
  EXPECT_TRUE(v.ok()) << v.to_string();
  args.push_back(g);
  auto r = interp::run(m, args);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<Literal>{};
}

TEST(Gather, GradientScattersBackWithDuplicatesAndClampedIndices) {
  std::vector<bool> present;
  std::vector<Literal> grads = vjp_of(gather_module("f32[3]", "s32[4]", "f32[4]", "axis=0"),
                                      {lit("f32[3]", {5, 6, 7}), lit("s32[4]", {0, 0, 9, 1})},
                                      lit("f32[4]", {1, 2, 3, 4}), 2, &present);
  EXPECT_EQ(present, (std::vector<bool>{true, false}));  // no gradient for the indices
  ASSERT_EQ(grads.size(), 1u);
  // 9 was clamped to 2, so row 2 was read and receives its gradient.
  EXPECT_EQ(grads[0], lit("f32[3]", {3, 4, 3}));
}

TEST(ScatterAdd, GradientPassesXAndZeroesSkippedUpdates) {
  std::vector<bool> present;
  std::vector<Literal> grads =
      vjp_of(scatter_module("f32[3]", "s32[4]", "f32[4]", "axis=0"),
             {lit("f32[3]", {0, 0, 0}), lit("s32[4]", {2, -1, 3, 0}), lit("f32[4]", {1, 1, 1, 1})},
             lit("f32[3]", {10, 20, 30}), 3, &present);
  EXPECT_EQ(present, (std::vector<bool>{true, false, true}));
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0], lit("f32[3]", {10, 20, 30}));
  // -1 and 3 were skipped: their updates had no effect, so no gradient.
  EXPECT_EQ(grads[1], lit("f32[4]", {30, 0, 0, 10}));
}

TEST(ScatterAdd, GradientMaskBroadcastsOverBatchAndTrailingDims) {
  // x [2,3,2], idx u32 [2,2] (batch dim 0, axis 1), updates [2,2,2].
  std::vector<bool> present;
  std::vector<Literal> grads = vjp_of(
      scatter_module("f32[2,3,2]", "u32[2,2]", "f32[2,2,2]", "axis=1, batch_dims=1"),
      {lit("f32[2,3,2]", std::vector<double>(12, 0.0)), lit("u32[2,2]", {2, 5, 3, 0}), lit("f32[2,2,2]", std::vector<double>(8, 1.0))},
      lit("f32[2,3,2]", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), 3, &present);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[1], lit("f32[2,2,2]", {4, 5, 0, 0, 0, 0, 6, 7}));
}

// ---- cost and sharding rule ----

TEST(Gather, CostReadsOnlyTheGatheredRowsAndDimMapFollowsTheLayout) {
  auto m = ir::parse_module(gather_module("f32[1000,8]", "s32[2,3]", "f32[2,3,8]", "axis=0"));
  ASSERT_TRUE(m.ok());
  const ir::Instr* g = (*m)->entry()->root();
  ops::Cost c = ops::cost_of(*g);
  EXPECT_EQ(c.bytes_read, 4.0 * (2 * 3 * 8) + 4.0 * 6);
  EXPECT_EQ(c.bytes_written, 4.0 * 2 * 3 * 8);
  EXPECT_EQ(ops::op_def(ir::Opcode::kGather).dim_map(*g), (std::vector<std::vector<int>>{{-1, 2}, {0, 1}}));

  auto t = ir::parse_module(scatter_module("f32[2,3,4]", "s32[2,5]", "f32[2,5,4]", "axis=1, batch_dims=1"));
  ASSERT_TRUE(t.ok());
  // The scattered-into axis (1) does not map: an index may land in any shard of it.
  EXPECT_EQ(ops::op_def(ir::Opcode::kScatterAdd).dim_map(*(*t)->entry()->root()),
            (std::vector<std::vector<int>>{{0, -1, 2}, {0, -1}, {0, -1, 2}}));
}

}  // namespace
}  // namespace kiln
