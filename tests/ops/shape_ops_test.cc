// Shape and data-movement ops: shape rules and their error messages, reference evaluation on
// hand-written literals, gradient rules evaluated on hand-computed cases, dimension maps and
// costs. Finite-difference checks of every gradient rule live in op_table_test.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln {
namespace {

using ir::Literal;

std::string module_text(std::string_view body) {
  return "module @t\n\nENTRY computation @main {\n" + std::string(body) + "}\n";
}

Literal lit(std::string_view shape, std::vector<double> values) {
  auto s = ir::parse_shape(shape);
  KILN_CHECK_OK(s);
  return Literal(*s, std::move(values));
}

Literal s32(int64_t v) { return Literal::scalar(ir::DType::kS32, static_cast<double>(v)); }

std::vector<double> iota(int n, double from = 0) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

std::unique_ptr<ir::Module> parse_verified(std::string_view body) {
  auto m = ir::parse_module(module_text(body));
  KILN_CHECK_OK(m);
  Status s = ops::verify(**m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return std::move(*m);
}

// The root op's reference evaluation on `args` (bound to the parameters by index).
Literal eval_root(std::string_view body, const std::vector<Literal>& args) {
  auto m = parse_verified(body);
  const ir::Instr* root = m->entry()->root();
  std::vector<const Literal*> operands;
  for (const ir::Instr* o : root->operands()) operands.push_back(&args.at(o->attrs().get_int("index")));
  return ops::op_def(root->opcode()).eval(*root, operands);
}

// The verifier's message for the module, or "ok".
std::string verify_message(std::string_view body) {
  auto m = ir::parse_module(module_text(body));
  KILN_CHECK_OK(m);
  Status s = ops::verify(**m);
  return s.ok() ? "ok" : s.message();
}

#define EXPECT_SHAPE_ERROR(body, substring)                                        \
  do {                                                                             \
    std::string msg_ = verify_message(body);                                       \
    EXPECT_NE(msg_.find(substring), std::string::npos) << "message was: " << msg_; \
  } while (0)

// Applies the root's gradient rule to `dout` and evaluates every operand gradient with the
// interpreter (nullopt where the rule gives none).
std::vector<std::optional<Literal>> vjp_root(std::string_view body, const std::vector<Literal>& args, const Literal& dout) {
  auto m = parse_verified(body);
  ir::Computation* c = m->entry();
  ir::Instr* root = c->root();
  ops::Builder b(c);
  ir::Instr* g = b.parameter(c->num_params(), root->shape(), "dout");
  ops::VjpContext ctx{b, root, {g}};
  std::vector<ir::Instr*> grads = ops::op_def(root->opcode()).vjp(ctx);
  EXPECT_EQ(static_cast<int>(grads.size()), root->num_operands());
  std::vector<ir::Instr*> present;
  for (ir::Instr* grad : grads) {
    if (grad) present.push_back(grad);
  }
  c->set_root(b.tuple(present));
  Status s = ops::verify(*m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<Literal> all = args;
  all.push_back(dout);
  auto values = interp::run(*m, all);
  KILN_CHECK_OK(values);
  std::vector<std::optional<Literal>> out;
  size_t k = 0;
  for (ir::Instr* grad : grads) out.push_back(grad ? std::optional<Literal>((*values)[k++]) : std::nullopt);
  return out;
}

const ir::Instr& root_of(const ir::Module& m) { return *m.entry()->root(); }

// ---- broadcast ----

constexpr const char* kBroadcast =
    "  %x = f32[3,1] parameter(), index=0\n"
    "  ROOT %b = f32[2,3,2] broadcast(%x), dims={1,2}\n";

TEST(Broadcast, ExpandsSizeOneDimsAndAddsNewOnes) {
  // result[a][b][c] = x[b][0]
  EXPECT_EQ(eval_root(kBroadcast, {lit("f32[3,1]", {1, 2, 3})}),
            lit("f32[2,3,2]", {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(eval_root("  %x = f32[] parameter(), index=0\n  ROOT %b = f32[2,2] broadcast(%x), dims={}\n",
                      {lit("f32[]", {1.5})}),
            lit("f32[2,2]", {1.5, 1.5, 1.5, 1.5}));
  EXPECT_EQ(eval_root("  %x = f32[2] parameter(), index=0\n  ROOT %b = f32[2,3] broadcast(%x), dims={0}\n",
                      {lit("f32[2]", {7, 8})}),
            lit("f32[2,3]", {7, 7, 7, 8, 8, 8}));
}

TEST(Broadcast, GradientSumsOverRepeatedElements) {
  // gx[b] = sum over a, c of g[a][b][c], g = 0..11: {0+1+6+7, 2+3+8+9, 4+5+10+11}.
  auto grads = vjp_root(kBroadcast, {lit("f32[3,1]", {1, 2, 3})}, lit("f32[2,3,2]", iota(12)));
  EXPECT_EQ(*grads[0], lit("f32[3,1]", {14, 22, 30}));
}

TEST(Broadcast, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %b = f32[3,2] broadcast(%x), dims={1,0}\n",
                     "must be strictly increasing");
  EXPECT_SHAPE_ERROR("  %x = f32[2] parameter(), index=0\n  ROOT %b = f32[2,3] broadcast(%x), dims={2}\n",
                     "dims={2} has dimension 2 outside the result rank 2");
  EXPECT_SHAPE_ERROR("  %x = f32[2] parameter(), index=0\n  ROOT %b = f32[3,2] broadcast(%x), dims={0}\n",
                     "operand dimension 0 has size 2 but result dimension 0 has size 3");
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %b = f32[2,3] broadcast(%x), dims={0}\n",
                     "one result dimension per operand dimension");
  EXPECT_SHAPE_ERROR("  %x = f32[2] parameter(), index=0\n  ROOT %b = s32[2] broadcast(%x), dims={0}\n",
                     "keeps the element type");
  EXPECT_SHAPE_ERROR("  %x = f32[2] parameter(), index=0\n  ROOT %b = f32[2] broadcast(%x)\n",
                     "broadcast needs attribute 'dims'");
}

TEST(Broadcast, DimMapFollowsDimsExceptExpandedOnes) {
  auto m = parse_verified(kBroadcast);
  EXPECT_EQ(ops::op_def(ir::Opcode::kBroadcast).dim_map(root_of(*m)), (std::vector<std::vector<int>>{{1, -1}}));
}

// ---- reshape ----

TEST(Reshape, KeepsRowMajorOrder) {
  const char* body = "  %x = f32[2,3] parameter(), index=0\n  ROOT %r = f32[3,1,2] reshape(%x)\n";
  EXPECT_EQ(eval_root(body, {lit("f32[2,3]", iota(6))}), lit("f32[3,1,2]", iota(6)));
  auto grads = vjp_root(body, {lit("f32[2,3]", iota(6))}, lit("f32[3,1,2]", iota(6, 10)));
  EXPECT_EQ(*grads[0], lit("f32[2,3]", iota(6, 10)));
}

TEST(Reshape, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %r = f32[5] reshape(%x)\n",
                     "reshape keeps the element count: f32[2,3] has 6 elements, f32[5] has 5");
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %r = bf16[6] reshape(%x)\n",
                     "reshape keeps the element type");
}

TEST(Reshape, DimMapKeepsOnlyOneToOneGroups) {
  auto map_of = [](const char* from, const char* to) {
    auto m = parse_verified(fmt::format("  %x = {} parameter(), index=0\n  ROOT %r = {} reshape(%x)\n", from, to));
    return ops::op_def(ir::Opcode::kReshape).dim_map(root_of(*m))[0];
  };
  EXPECT_EQ(map_of("f32[6,4]", "f32[2,3,4]"), (std::vector<int>{-1, 2}));
  EXPECT_EQ(map_of("f32[2,3,4]", "f32[6,1,4]"), (std::vector<int>{-1, -1, 2}));
  EXPECT_EQ(map_of("f32[2,1,3]", "f32[2,3]"), (std::vector<int>{0, -1, 1}));
  EXPECT_EQ(map_of("f32[4,6]", "f32[4,2,3]"), (std::vector<int>{0, -1}));
  EXPECT_EQ(map_of("f32[2,3]", "f32[3,2]"), (std::vector<int>{-1, -1}));
}

// ---- transpose ----

constexpr const char* kTranspose3 =
    "  %x = f32[2,3,4] parameter(), index=0\n"
    "  ROOT %t = f32[4,2,3] transpose(%x), perm={2,0,1}\n";

TEST(Transpose, ResultDimIIsOperandDimPermI) {
  EXPECT_EQ(eval_root("  %x = f32[2,3] parameter(), index=0\n  ROOT %t = f32[3,2] transpose(%x), perm={1,0}\n",
                      {lit("f32[2,3]", iota(6))}),
            lit("f32[3,2]", {0, 3, 1, 4, 2, 5}));
  // result[k][i][j] = x[i][j][k] = 12i + 4j + k
  Literal r = eval_root(kTranspose3, {lit("f32[2,3,4]", iota(24))});
  EXPECT_EQ(r.at(0), 0);         // [0][0][0]
  EXPECT_EQ(r.at(1), 4);         // [0][0][1] = x[0][1][0]
  EXPECT_EQ(r.at(3), 12);        // [0][1][0] = x[1][0][0]
  EXPECT_EQ(r.at(6 + 5), 12 + 8 + 1);  // [1][1][2] = x[1][2][1]
}

TEST(Transpose, GradientAppliesTheInversePermutation) {
  // Transposing is orthogonal: the gradient of transpose(x) at dout = transpose(x) is x.
  Literal x = lit("f32[2,3,4]", iota(24));
  Literal y = eval_root(kTranspose3, {x});
  EXPECT_EQ(*vjp_root(kTranspose3, {x}, y)[0], x);
}

TEST(Transpose, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %t = f32[2,2] transpose(%x), perm={0,0}\n",
                     "transpose perm repeats dimension 0; perm={0,0} must be a permutation of 0..1 for f32[2,3]");
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %t = f32[3,2] transpose(%x), perm={1,2}\n",
                     "outside [0, 2)");
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %t = f32[3,2] transpose(%x), perm={1}\n",
                     "perm={1} must be a permutation of 0..1");
  EXPECT_SHAPE_ERROR("  %x = f32[2,3] parameter(), index=0\n  ROOT %t = f32[2,3] transpose(%x), perm={1,0}\n",
                     "transpose result is f32[3,2] but f32[2,3] was declared");
}

TEST(Transpose, DimMapFollowsPerm) {
  auto m = parse_verified(kTranspose3);
  EXPECT_EQ(ops::op_def(ir::Opcode::kTranspose).dim_map(root_of(*m)), (std::vector<std::vector<int>>{{1, 2, 0}}));
}

// ---- slice ----

constexpr const char* kStridedSlice =
    "  %x = f32[5,5] parameter(), index=0\n"
    "  ROOT %s = f32[2,2] slice(%x), start={1,0}, limit={5,5}, strides={2,3}\n";

TEST(Slice, TakesStridedWindow) {
  // Rows 1, 3 of [1,5); columns 0, 3 of [0,5).
  EXPECT_EQ(eval_root(kStridedSlice, {lit("f32[5,5]", iota(25))}), lit("f32[2,2]", {5, 8, 15, 18}));
  EXPECT_EQ(eval_root("  %x = f32[3,4] parameter(), index=0\n  ROOT %s = f32[2,2] slice(%x), start={1,1}, limit={3,3}\n",
                      {lit("f32[3,4]", iota(12))}),
            lit("f32[2,2]", {5, 6, 9, 10}));
}

TEST(Slice, GradientScattersBackIntoZeros) {
  auto grads = vjp_root(kStridedSlice, {lit("f32[5,5]", iota(25))}, lit("f32[2,2]", {1, 2, 3, 4}));
  std::vector<double> want(25, 0.0);
  want[5] = 1;
  want[8] = 2;
  want[15] = 3;
  want[18] = 4;
  EXPECT_EQ(*grads[0], lit("f32[5,5]", want));
}

TEST(Slice, EmptySliceHasZeroGradient) {
  const char* body = "  %x = f32[3] parameter(), index=0\n  ROOT %s = f32[0] slice(%x), start={2}, limit={2}\n";
  auto grads = vjp_root(body, {lit("f32[3]", {1, 2, 3})}, lit("f32[0]", {}));
  EXPECT_EQ(*grads[0], lit("f32[3]", {0, 0, 0}));
}

TEST(Slice, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %x = f32[4] parameter(), index=0\n  ROOT %s = f32[1] slice(%x), start={3}, limit={2}\n",
                     "slice dimension 0 takes [3, 2) of f32[4] (size 4); need 0 <= start <= limit <= size");
  EXPECT_SHAPE_ERROR("  %x = f32[4] parameter(), index=0\n  ROOT %s = f32[5] slice(%x), start={0}, limit={5}\n",
                     "need 0 <= start <= limit <= size");
  EXPECT_SHAPE_ERROR(
      "  %x = f32[4] parameter(), index=0\n  ROOT %s = f32[4] slice(%x), start={0}, limit={4}, strides={0}\n",
      "slice strides={0} must be positive");
  EXPECT_SHAPE_ERROR("  %x = f32[4,4] parameter(), index=0\n  ROOT %s = f32[4] slice(%x), start={0}, limit={4}\n",
                     "slice start={0} needs one entry per dimension of the operand f32[4,4] (2 entries)");
  EXPECT_SHAPE_ERROR("  %x = f32[4] parameter(), index=0\n  ROOT %s = f32[2] slice(%x), start={0}, limit={4}, strides={2}, step=1\n",
                     "slice has no attribute 'step'");
}

TEST(Slice, DimMapKeepsWholeDimsAndCostReadsOnlyTheWindow) {
  auto m = parse_verified(
      "  %x = f32[4,6] parameter(), index=0\n  ROOT %s = f32[4,3] slice(%x), start={0,1}, limit={4,4}\n");
  EXPECT_EQ(ops::op_def(ir::Opcode::kSlice).dim_map(root_of(*m)), (std::vector<std::vector<int>>{{0, -1}}));
  ops::Cost cost = ops::cost_of(root_of(*m));
  EXPECT_EQ(cost.bytes_read, 4 * 3 * 4);
  EXPECT_EQ(cost.bytes_written, 4 * 3 * 4);
}

// A loop fusion that reads an operand only through slices (fusion.h: mapped reads) reads
// the windows: here one quarter of %x, and %y whole, at most once however many slices read it.
TEST(Slice, AFusionReadsOnlyTheWindowsOfASlicedOperand) {
  auto m = ir::parse_module(R"(module @t

computation @body {
  %px = f32[4,8] parameter(), index=0
  %py = f32[4,4] parameter(), index=1
  %a = f32[4,2] slice(%px), limit={4,2}, start={0,0}
  %lo = f32[4,2] slice(%py), limit={4,2}, start={0,0}
  %hi = f32[4,2] slice(%py), limit={4,4}, start={0,2}
  %again = f32[4,2] slice(%py), limit={4,4}, start={0,2}
  %s = f32[4,2] add(%lo, %hi)
  %t = f32[4,2] add(%s, %again)
  ROOT %r = f32[4,2] mul(%a, %t)
}

ENTRY computation @main {
  %x = f32[4,8] parameter(), index=0
  %y = f32[4,4] parameter(), index=1
  ROOT %f = f32[4,2] fusion(%x, %y), kind=loop, calls={@body}
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ops::Cost cost = ops::cost_of(*(*m)->entry()->root());
  EXPECT_EQ(cost.bytes_read, 4 * 2 * 4 + 4 * 4 * 4);
  EXPECT_EQ(cost.bytes_written, 4 * 2 * 4);
}

// ---- pad ----

constexpr const char* kInteriorPad =
    "  %x = f32[2,3] parameter(), index=0\n"
    "  %v = f32[] parameter(), index=1\n"
    "  ROOT %p = f32[4,9] pad(%x, %v), low={1,0}, high={0,2}, interior={1,2}\n";

TEST(Pad, PlacesElementsWithEdgesAndInteriorGaps) {
  Literal r = eval_root(kInteriorPad, {lit("f32[2,3]", {1, 2, 3, 4, 5, 6}), lit("f32[]", {-1})});
  std::vector<double> blank(9, -1.0);
  std::vector<double> want;
  for (auto row : {blank, std::vector<double>{1, -1, -1, 2, -1, -1, 3, -1, -1}, blank,
                   std::vector<double>{4, -1, -1, 5, -1, -1, 6, -1, -1}}) {
    want.insert(want.end(), row.begin(), row.end());
  }
  EXPECT_EQ(r, lit("f32[4,9]", want));
}

TEST(Pad, GradientSplitsBetweenOperandAndValue) {
  // g = 1..36; x's elements sit at rows 1, 3 and columns 0, 3, 6.
  auto grads = vjp_root(kInteriorPad, {lit("f32[2,3]", iota(6)), lit("f32[]", {0})}, lit("f32[4,9]", iota(36, 1)));
  EXPECT_EQ(*grads[0], lit("f32[2,3]", {10, 13, 16, 28, 31, 34}));
  EXPECT_EQ(*grads[1], lit("f32[]", {666 - (10 + 13 + 16 + 28 + 31 + 34)}));
}

TEST(Pad, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR(
      "  %x = f32[2] parameter(), index=0\n  %v = f32[] parameter(), index=1\n"
      "  ROOT %p = f32[1] pad(%x, %v), low={-1}, high={0}\n",
      "pad low={-1} must not be negative");
  EXPECT_SHAPE_ERROR(
      "  %x = f32[2] parameter(), index=0\n  %v = f32[1] parameter(), index=1\n"
      "  ROOT %p = f32[3] pad(%x, %v), low={1}, high={0}\n",
      "pad value must be a scalar f32[] like the operand f32[2], got f32[1]");
  EXPECT_SHAPE_ERROR(
      "  %x = f32[2] parameter(), index=0\n  %v = s32[] parameter(), index=1\n"
      "  ROOT %p = f32[3] pad(%x, %v), low={1}, high={0}\n",
      "pad value must be a scalar f32[]");
  EXPECT_SHAPE_ERROR(
      "  %x = f32[2] parameter(), index=0\n  %v = f32[] parameter(), index=1\n"
      "  ROOT %p = f32[3] pad(%x, %v), low={1}, high={0}, interior={0,0}\n",
      "pad interior={0,0} needs one entry per dimension");
  EXPECT_SHAPE_ERROR("  %x = f32[2] parameter(), index=0\n  ROOT %p = f32[3] pad(%x), low={1}, high={0}\n",
                     "pad takes 2 operands, got 1");
}

TEST(Pad, DimMapKeepsUnpaddedDims) {
  auto m = parse_verified(
      "  %x = f32[2,3] parameter(), index=0\n  %v = f32[] parameter(), index=1\n"
      "  ROOT %p = f32[2,5] pad(%x, %v), low={0,1}, high={0,1}\n");
  EXPECT_EQ(ops::op_def(ir::Opcode::kPad).dim_map(root_of(*m)), (std::vector<std::vector<int>>{{0, -1}, {}}));
}

// ---- concatenate ----

constexpr const char* kConcat =
    "  %a = f32[2,1] parameter(), index=0\n"
    "  %b = f32[2,2] parameter(), index=1\n"
    "  ROOT %c = f32[2,3] concatenate(%a, %b), dim=1\n";

TEST(Concatenate, JoinsAlongDim) {
  EXPECT_EQ(eval_root(kConcat, {lit("f32[2,1]", {1, 2}), lit("f32[2,2]", {3, 4, 5, 6})}),
            lit("f32[2,3]", {1, 3, 4, 2, 5, 6}));
  EXPECT_EQ(eval_root("  %a = f32[1,2] parameter(), index=0\n  %b = f32[2,2] parameter(), index=1\n"
                      "  ROOT %c = f32[3,2] concatenate(%a, %b), dim=0\n",
                      {lit("f32[1,2]", {1, 2}), lit("f32[2,2]", {3, 4, 5, 6})}),
            lit("f32[3,2]", {1, 2, 3, 4, 5, 6}));
}

TEST(Concatenate, GradientSlicesEachOperandsPart) {
  auto grads = vjp_root(kConcat, {lit("f32[2,1]", {1, 2}), lit("f32[2,2]", {3, 4, 5, 6})}, lit("f32[2,3]", iota(6)));
  EXPECT_EQ(*grads[0], lit("f32[2,1]", {0, 3}));
  EXPECT_EQ(*grads[1], lit("f32[2,2]", {1, 2, 4, 5}));
}

TEST(Concatenate, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %a = f32[2,1] parameter(), index=0\n  %b = f32[3,2] parameter(), index=1\n"
                     "  ROOT %c = f32[2,3] concatenate(%a, %b), dim=1\n",
                     "equal dims except dim=1: operand 0 is f32[2,1], operand 1 is f32[3,2]");
  EXPECT_SHAPE_ERROR("  %a = f32[2,1] parameter(), index=0\n  %b = s32[2,1] parameter(), index=1\n"
                     "  ROOT %c = f32[2,2] concatenate(%a, %b), dim=1\n",
                     "one element type");
  EXPECT_SHAPE_ERROR("  %a = f32[2,1] parameter(), index=0\n  %b = f32[2] parameter(), index=1\n"
                     "  ROOT %c = f32[2,2] concatenate(%a, %b), dim=1\n",
                     "operand 1 is f32[2]");
  EXPECT_SHAPE_ERROR("  %a = f32[2,1] parameter(), index=0\n  ROOT %c = f32[2,1] concatenate(%a), dim=2\n",
                     "concatenate dim=2 outside the rank 2 of f32[2,1]");
  EXPECT_SHAPE_ERROR("  %a = f32[2,1] parameter(), index=0\n  ROOT %c = f32[2,1] concatenate(), dim=0\n",
                     "concatenate takes at least 1 operands, got 0");
}

TEST(Concatenate, DimMapKeepsAllButTheJoinedDim) {
  auto m = parse_verified(kConcat);
  EXPECT_EQ(ops::op_def(ir::Opcode::kConcatenate).dim_map(root_of(*m)),
            (std::vector<std::vector<int>>{{0, -1}, {0, -1}}));
}

// ---- dynamic_slice ----

constexpr const char* kDynamicSlice =
    "  %x = f32[4,5] parameter(), index=0\n"
    "  %i = s32[] parameter(), index=1\n"
    "  %j = s32[] parameter(), index=2\n"
    "  ROOT %s = f32[2,3] dynamic_slice(%x, %i, %j), sizes={2,3}\n";

TEST(DynamicSlice, ClampsStartsLikeXla) {
  Literal x = lit("f32[4,5]", iota(20));
  EXPECT_EQ(eval_root(kDynamicSlice, {x, s32(1), s32(1)}), lit("f32[2,3]", {6, 7, 8, 11, 12, 13}));
  // Column start 4 is clamped to 5 - 3 = 2; row start -3 to 0.
  EXPECT_EQ(eval_root(kDynamicSlice, {x, s32(1), s32(4)}), lit("f32[2,3]", {7, 8, 9, 12, 13, 14}));
  EXPECT_EQ(eval_root(kDynamicSlice, {x, s32(-3), s32(1)}), lit("f32[2,3]", {1, 2, 3, 6, 7, 8}));
  EXPECT_EQ(eval_root(kDynamicSlice, {x, s32(100), s32(-100)}), lit("f32[2,3]", {10, 11, 12, 15, 16, 17}));
}

TEST(DynamicSlice, GradientWritesIntoTheClampedWindowAndSkipsStarts) {
  auto grads = vjp_root(kDynamicSlice, {lit("f32[4,5]", iota(20)), s32(1), s32(4)}, lit("f32[2,3]", {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(*grads[0], lit("f32[4,5]", {0, 0, 0, 0, 0,  //
                                        0, 0, 1, 2, 3,  //
                                        0, 0, 4, 5, 6,  //
                                        0, 0, 0, 0, 0}));
  EXPECT_FALSE(grads[1].has_value());
  EXPECT_FALSE(grads[2].has_value());
}

TEST(DynamicSlice, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %x = f32[4,5] parameter(), index=0\n  %i = s32[] parameter(), index=1\n"
                     "  ROOT %s = f32[2,3] dynamic_slice(%x, %i), sizes={2,3}\n",
                     "dynamic_slice needs one s32[] start index per dimension of f32[4,5] (2), got 1");
  EXPECT_SHAPE_ERROR("  %x = f32[4] parameter(), index=0\n  %i = f32[] parameter(), index=1\n"
                     "  ROOT %s = f32[2] dynamic_slice(%x, %i), sizes={2}\n",
                     "dynamic_slice start index 0 must be s32[], got f32[]");
  EXPECT_SHAPE_ERROR("  %x = f32[4] parameter(), index=0\n  %i = s32[1] parameter(), index=1\n"
                     "  ROOT %s = f32[2] dynamic_slice(%x, %i), sizes={2}\n",
                     "must be s32[], got s32[1]");
  EXPECT_SHAPE_ERROR("  %x = f32[4] parameter(), index=0\n  %i = s32[] parameter(), index=1\n"
                     "  ROOT %s = f32[5] dynamic_slice(%x, %i), sizes={5}\n",
                     "dynamic_slice sizes={5} must lie in [0, dim size] of f32[4] (dimension 0)");
}

TEST(DynamicSlice, DimMapKeepsWholeDims) {
  auto m = parse_verified(
      "  %x = f32[4,5] parameter(), index=0\n  %i = s32[] parameter(), index=1\n  %j = s32[] parameter(), index=2\n"
      "  ROOT %s = f32[2,5] dynamic_slice(%x, %i, %j), sizes={2,5}\n");
  EXPECT_EQ(ops::op_def(ir::Opcode::kDynamicSlice).dim_map(root_of(*m)),
            (std::vector<std::vector<int>>{{-1, 1}, {}, {}}));
}

// ---- dynamic_update_slice ----

constexpr const char* kDynamicUpdateSlice =
    "  %x = f32[3,4] parameter(), index=0\n"
    "  %u = f32[2,2] parameter(), index=1\n"
    "  %i = s32[] parameter(), index=2\n"
    "  %j = s32[] parameter(), index=3\n"
    "  ROOT %r = f32[3,4] dynamic_update_slice(%x, %u, %i, %j)\n";

TEST(DynamicUpdateSlice, WritesAtClampedStarts) {
  Literal x = lit("f32[3,4]", iota(12));
  Literal u = lit("f32[2,2]", {-1, -2, -3, -4});
  EXPECT_EQ(eval_root(kDynamicUpdateSlice, {x, u, s32(0), s32(1)}),
            lit("f32[3,4]", {0, -1, -2, 3, 4, -3, -4, 7, 8, 9, 10, 11}));
  // Row start 2 is clamped to 3 - 2 = 1, column start -1 to 0.
  EXPECT_EQ(eval_root(kDynamicUpdateSlice, {x, u, s32(2), s32(-1)}),
            lit("f32[3,4]", {0, 1, 2, 3, -1, -2, 6, 7, -3, -4, 10, 11}));
}

TEST(DynamicUpdateSlice, GradientSplitsAtTheWindow) {
  auto grads = vjp_root(kDynamicUpdateSlice, {lit("f32[3,4]", iota(12)), lit("f32[2,2]", {1, 2, 3, 4}), s32(2), s32(-1)},
                        lit("f32[3,4]", iota(12, 1)));
  EXPECT_EQ(*grads[0], lit("f32[3,4]", {1, 2, 3, 4, 0, 0, 7, 8, 0, 0, 11, 12}));
  EXPECT_EQ(*grads[1], lit("f32[2,2]", {5, 6, 9, 10}));
  EXPECT_FALSE(grads[2].has_value());
  EXPECT_FALSE(grads[3].has_value());
}

TEST(DynamicUpdateSlice, ShapeErrorsNameTheProblem) {
  EXPECT_SHAPE_ERROR("  %x = f32[3] parameter(), index=0\n  %u = f32[4] parameter(), index=1\n"
                     "  %i = s32[] parameter(), index=2\n  ROOT %r = f32[3] dynamic_update_slice(%x, %u, %i)\n",
                     "fit inside it: operand f32[3], update f32[4]");
  EXPECT_SHAPE_ERROR("  %x = f32[3] parameter(), index=0\n  %u = bf16[2] parameter(), index=1\n"
                     "  %i = s32[] parameter(), index=2\n  ROOT %r = f32[3] dynamic_update_slice(%x, %u, %i)\n",
                     "update must have the operand's element type and rank");
  EXPECT_SHAPE_ERROR("  %x = f32[3] parameter(), index=0\n  %u = f32[2] parameter(), index=1\n"
                     "  ROOT %r = f32[3] dynamic_update_slice(%x, %u)\n",
                     "dynamic_update_slice needs one s32[] start index per dimension of f32[3] (1), got 0");
  EXPECT_SHAPE_ERROR("  %x = f32[3] parameter(), index=0\n  ROOT %r = f32[3] dynamic_update_slice(%x)\n",
                     "dynamic_update_slice takes at least 2 operands, got 1");
}

TEST(DynamicUpdateSlice, DimMapAndInPlaceCost) {
  auto m = parse_verified(kDynamicUpdateSlice);
  EXPECT_EQ(ops::op_def(ir::Opcode::kDynamicUpdateSlice).dim_map(root_of(*m)),
            (std::vector<std::vector<int>>{{0, 1}, {-1, -1}, {}, {}}));
  ops::Cost cost = ops::cost_of(root_of(*m));
  EXPECT_EQ(cost.bytes_written, 2 * 2 * 4);
  EXPECT_EQ(cost.bytes_read, 2 * 2 * 4 + 2 * 4);
}

// ---- every op: its examples verify and its builder calls agree with its shape rule ----

TEST(ShapeOps, BuilderEmitsVerifiedInstructions) {
  auto m = std::make_unique<ir::Module>("b");
  ir::Computation* c = m->add_computation("main");
  m->set_entry(c);
  ops::Builder b(c);
  ir::Instr* x = b.parameter(0, ir::Shape(ir::DType::kF32, {2, 3}));
  ir::Instr* i = b.parameter(1, ir::Shape::scalar(ir::DType::kS32));
  EXPECT_EQ(b.broadcast(x, {4, 2, 3}, {1, 2})->shape().to_string(), "f32[4,2,3]");
  EXPECT_EQ(b.transpose(x, {1, 0})->shape().to_string(), "f32[3,2]");
  EXPECT_EQ(b.slice(x, {0, 0}, {2, 3}, {1, 2})->shape().to_string(), "f32[2,2]");
  EXPECT_EQ(b.pad(x, b.scalar(ir::DType::kF32, 0), {1, 0}, {1, 0}, {0, 1})->shape().to_string(), "f32[4,5]");
  EXPECT_EQ(b.concatenate({x, x}, 0)->shape().to_string(), "f32[4,3]");
  EXPECT_EQ(b.dynamic_slice(x, {i, i}, {1, 2})->shape().to_string(), "f32[1,2]");
  ir::Instr* root = b.dynamic_update_slice(x, b.zeros(ir::Shape(ir::DType::kF32, {1, 3})), {i, i});
  c->set_root(root);
  Status s = ops::verify(*m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto r = b.try_emit(ir::Opcode::kTranspose, {x}, {{"perm", std::vector<int64_t>{0, 0}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must be a permutation"), std::string::npos);
}

}  // namespace
}  // namespace kiln
