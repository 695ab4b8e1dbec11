// The data-movement, reduction, contraction, indexing and ordering lowerings on XLA's CPU
// plugin against the reference interpreter, on the cases the registry examples leave out:
// larger shapes, bf16, ties and NaN in sort/topk, out-of-range and huge u32 indices,
// duplicate scatter targets, batch dims, mixed-precision dots, empty reductions.
//
// Tolerances: expect_close's defaults (1e-5 relative for f32 against the interpreter's
// double accumulation, 1e-2 for bf16, exact for integers and for ops that only move data).
// Where a sum runs over thousands of f32 terms the tolerance is stated at the check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/registry.h"
#include "tests/backend/pjrt/pjrt_testing.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;
using ir::Literal;
using testing::module_text;
using testing::parse;
using ir::Shape;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Runs `text` on the plugin and on the interpreter with `args` and compares.
void expect_same(const std::string& what, const std::string& text, const std::vector<Literal>& args,
                 double relative = -1) {
  std::unique_ptr<ir::Module> module = parse(text);
  ASSERT_NE(module, nullptr);
  const Status verified = ops::verify(*module);
  ASSERT_TRUE(verified.ok()) << what << ": " << verified.message();
  const EmitOptions options;  // one device
  auto want = testing::run_on_interpreter(*module, options.mesh, {args});
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
  auto got = testing::run_on_cpu_plugin(*module, options, {args});
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
  testing::expect_close(*want, *got, what, relative);
}

// Seeded values: uniform in [lo, hi), or small integers (many ties) when `ties`.
Literal random_literal(const std::string& shape_text, uint64_t seed, double lo, double hi, bool ties = false) {
  auto shape = ir::parse_shape(shape_text);
  KILN_CHECK(shape.ok()) << shape_text;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> values(shape->num_elements());
  for (double& v : values) v = ties ? std::floor(u(rng)) : u(rng);
  return Literal(*shape, std::move(values));
}

Literal literal(const std::string& shape_text, std::vector<double> values) {
  auto shape = ir::parse_shape(shape_text);
  KILN_CHECK(shape.ok()) << shape_text;
  return Literal(*shape, std::move(values));
}

std::string emit(const std::string& text, const EmitOptions& options = {}) {
  std::unique_ptr<ir::Module> module = parse(text);
  if (module == nullptr) return "";
  auto emitted = emit_stablehlo(*module, options);
  EXPECT_TRUE(emitted.ok()) << emitted.status().message();
  return emitted.ok() ? *emitted : "";
}

// ---- the emitted text: the forms the semantics rely on ----

TEST(LowerDataOpsText, SortIsStableWithAnIotaOperand) {
  const std::string text = emit(module_text("  %x = f32[2,5] parameter(), index=0\n",
                                            "  ROOT %t = (f32[2,5], s32[2,5]) sort(%x), descending=1\n"));
  EXPECT_NE(text.find("\"stablehlo.sort\""), std::string::npos) << text;
  EXPECT_NE(text.find("is_stable = true"), std::string::npos) << text;
  EXPECT_NE(text.find("iota_dimension = 1"), std::string::npos) << text;
}

TEST(LowerDataOpsText, F32DotIsHighestPrecisionAndBf16DotAccumulatesInF32) {
  const std::string f32 = emit(module_text("  %a = f32[2,3] parameter(), index=0\n  %b = f32[3,4] parameter(), index=1\n",
                                           "  ROOT %d = f32[2,4] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, "
                                           "rhs_batch={}, rhs_contract={0}\n"));
  EXPECT_NE(f32.find("#stablehlo<precision HIGHEST>"), std::string::npos) << f32;
  const std::string bf16_module = module_text("  %a = bf16[2,3] parameter(), index=0\n  %b = bf16[3,4] parameter(), index=1\n",
                                              "  ROOT %d = bf16[2,4] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, "
                                              "rhs_batch={}, rhs_contract={0}\n");
  // On a GPU or TPU: bf16 operands into an f32 product (one mixed-precision dot), rounded once
  // to bf16.
  EmitOptions accelerator;
  accelerator.mixed_precision_dot = true;
  const std::string mixed = emit(bf16_module, accelerator);
  EXPECT_NE(mixed.find("(tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf32>"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("\"stablehlo.convert\""), std::string::npos) << mixed;
  // XLA:CPU has no such dot: the operands widen to f32 first (the same exact products).
  const std::string widened = emit(bf16_module);
  EXPECT_NE(widened.find("(tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>"), std::string::npos) << widened;
  EXPECT_NE(widened.find("#stablehlo<precision HIGHEST>"), std::string::npos) << widened;
}

TEST(LowerDataOpsText, Bf16SumAccumulatesInF32) {
  const std::string text = emit(module_text("  %x = bf16[4,8] parameter(), index=0\n",
                                            "  ROOT %r = bf16[4] reduce_sum(%x), dims={1}\n"));
  EXPECT_NE(text.find("(tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>"), std::string::npos) << text;
}

// ---- shape ops ----

TEST(LowerDataOps, ShapeOpsOnLargerShapes) {
  expect_same("transpose rank 4",
              module_text("  %x = f32[3,4,5,6] parameter(), index=0\n",
                          "  ROOT %t = f32[6,3,5,4] transpose(%x), perm={3,0,2,1}\n"),
              {random_literal("f32[3,4,5,6]", 1, -2, 2)});
  expect_same("strided slice",
              module_text("  %x = f32[17,9] parameter(), index=0\n",
                          "  ROOT %s = f32[5,3] slice(%x), limit={16,9}, start={2,1}, strides={3,3}\n"),
              {random_literal("f32[17,9]", 2, -2, 2)});
  expect_same("pad with interior, bf16",
              module_text("  %x = bf16[5,4] parameter(), index=0\n  %v = bf16[] parameter(), index=1\n",
                          "  ROOT %p = bf16[17,7] pad(%x, %v), high={3,3}, interior={2,0}, low={1,0}\n"),
              {random_literal("bf16[5,4]", 3, -2, 2), literal("bf16[]", {-7.5})});
  expect_same("broadcast to a bigger shape",
              module_text("  %x = bf16[1,6] parameter(), index=0\n",
                          "  ROOT %b = bf16[4,5,6] broadcast(%x), dims={1,2}\n"),
              {random_literal("bf16[1,6]", 4, -2, 2)});
  expect_same("concatenate of one operand and of s32",
              module_text("  %a = s32[2,3] parameter(), index=0\n  %b = s32[2,4] parameter(), index=1\n",
                          "  %c = s32[2,3] concatenate(%a), dim=1\n"
                          "  ROOT %r = s32[2,7] concatenate(%c, %b), dim=1\n"),
              {random_literal("s32[2,3]", 5, -9, 9), random_literal("s32[2,4]", 6, -9, 9)});
  expect_same("reshape rank 3 to 1",
              module_text("  %x = f32[2,3,4] parameter(), index=0\n", "  ROOT %r = f32[24] reshape(%x)\n"),
              {random_literal("f32[2,3,4]", 7, -2, 2)});
}

// Kiln clamps start indices into [0, dim - size] as XLA does: every start in [-3, 8) on both dims.
TEST(LowerDataOps, DynamicSliceAndUpdateClampTheirStarts) {
  const std::string slice = module_text(
      "  %x = f32[4,5] parameter(), index=0\n  %i = s32[] parameter(), index=1\n  %j = s32[] parameter(), index=2\n",
      "  ROOT %s = f32[2,3] dynamic_slice(%x, %i, %j), sizes={2,3}\n");
  const std::string update = module_text(
      "  %x = bf16[4,5] parameter(), index=0\n  %u = bf16[2,3] parameter(), index=1\n"
      "  %i = s32[] parameter(), index=2\n  %j = s32[] parameter(), index=3\n",
      "  ROOT %r = bf16[4,5] dynamic_update_slice(%x, %u, %i, %j)\n");
  for (int i : {-3, 0, 2, 3, 7}) {
    for (int j : {-1, 1, 2, 5}) {
      const Literal si = literal("s32[]", {static_cast<double>(i)}), sj = literal("s32[]", {static_cast<double>(j)});
      expect_same(fmt::format("dynamic_slice at ({}, {})", i, j), slice, {random_literal("f32[4,5]", 8, -2, 2), si, sj});
      expect_same(fmt::format("dynamic_update_slice at ({}, {})", i, j), update,
                  {random_literal("bf16[4,5]", 9, -2, 2), random_literal("bf16[2,3]", 10, -2, 2), si, sj});
    }
  }
}

// ---- reductions ----

TEST(LowerDataOps, LongReductions) {
  // 4096 f32 terms in [-2, 2): XLA's order differs from the double reference; the error
  // stays within about sqrt(n) * 2^-24 * sum|x| ~ 3e-5 of the |sum| scale; 1e-4 relative.
  expect_same("f32 reduce_sum over 4096",
              module_text("  %x = f32[3,4096] parameter(), index=0\n", "  ROOT %r = f32[3] reduce_sum(%x), dims={1}\n"),
              {random_literal("f32[3,4096]", 11, -2, 2)}, 1e-4);
  // bf16 rounded at every step would be off by far more than 1e-2 over 4096 positive terms.
  expect_same("bf16 reduce_sum over 4096",
              module_text("  %x = bf16[3,4096] parameter(), index=0\n", "  ROOT %r = bf16[3] reduce_sum(%x), dims={1}\n"),
              {random_literal("bf16[3,4096]", 12, 0, 2)});
  expect_same("bf16 reduce_max over two dims",
              module_text("  %x = bf16[6,7,300] parameter(), index=0\n",
                          "  ROOT %r = bf16[7] reduce_max(%x), dims={0,2}\n"),
              {random_literal("bf16[6,7,300]", 13, -5, 5)});
  expect_same("s32 reduce_sum and reduce_min",
              module_text("  %x = s32[5,9] parameter(), index=0\n",
                          "  %s = s32[5] reduce_sum(%x), dims={1}\n  %m = s32[9] reduce_min(%x), dims={0}\n"
                          "  ROOT %t = (s32[5], s32[9]) tuple(%s, %m)\n"),
              {random_literal("s32[5,9]", 14, -100, 100)});
}

TEST(LowerDataOps, MaxAndMinPropagateNaN) {
  for (const std::string dtype : {"f32", "bf16"}) {
    Literal x = random_literal(dtype + "[4,6]", 15, -2, 2);
    x.mutable_values()[2] = kNaN;          // row 0
    x.mutable_values()[6 * 2 + 5] = kNaN;  // row 2, last column
    x.mutable_values()[6 * 3 + 1] = kInf;
    x.mutable_values()[6 * 1 + 0] = -kInf;
    const std::string text = module_text(
        fmt::format("  %x = {}[4,6] parameter(), index=0\n", dtype),
        fmt::format("  %a = {0}[4] reduce_max(%x), dims={{1}}\n  %b = {0}[4] reduce_min(%x), dims={{1}}\n"
                    "  %c = {0}[6] reduce_max(%x), dims={{0}}\n  %d = {0}[6] reduce_min(%x), dims={{0}}\n"
                    "  ROOT %t = ({0}[4], {0}[4], {0}[6], {0}[6]) tuple(%a, %b, %c, %d)\n",
                    dtype));
    expect_same(dtype + " reduce_max / reduce_min with NaN and infinities", text, {x});
  }
}

TEST(LowerDataOps, EmptyReductionsGiveTheIdentity) {
  expect_same("empty f32 reductions",
              module_text("  %x = f32[3,0] parameter(), index=0\n",
                          "  %a = f32[3] reduce_max(%x), dims={1}\n  %b = f32[3] reduce_min(%x), dims={1}\n"
                          "  %c = f32[3] reduce_sum(%x), dims={1}\n"
                          "  ROOT %t = (f32[3], f32[3], f32[3]) tuple(%a, %b, %c)\n"),
              {literal("f32[3,0]", {})});
  expect_same("empty s32 reductions",
              module_text("  %x = s32[0,2] parameter(), index=0\n",
                          "  %a = s32[2] reduce_max(%x), dims={0}\n  %b = s32[2] reduce_min(%x), dims={0}\n"
                          "  ROOT %t = (s32[2], s32[2]) tuple(%a, %b)\n"),
              {literal("s32[0,2]", {})});
}

// ---- dot_general ----

TEST(LowerDataOps, DotGeneralShapesAndDtypes) {
  expect_same("f32 matmul 64x128x96",
              module_text("  %a = f32[64,128] parameter(), index=0\n  %b = f32[128,96] parameter(), index=1\n",
                          "  ROOT %d = f32[64,96] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, "
                          "rhs_contract={0}\n"),
              {random_literal("f32[64,128]", 16, -2, 2), random_literal("f32[128,96]", 17, -2, 2)});
  expect_same("bf16 x bf16 -> f32 with batch dims",
              module_text("  %a = bf16[4,16,32] parameter(), index=0\n  %b = bf16[32,4,8] parameter(), index=1\n",
                          "  ROOT %d = f32[4,16,8] dot_general(%a, %b), lhs_batch={0}, lhs_contract={2}, rhs_batch={1}, "
                          "rhs_contract={0}\n"),
              {random_literal("bf16[4,16,32]", 18, -2, 2), random_literal("bf16[32,4,8]", 19, -2, 2)});
  expect_same("bf16 x bf16 -> bf16, 256 terms",
              module_text("  %a = bf16[8,256] parameter(), index=0\n  %b = bf16[4,256] parameter(), index=1\n",
                          "  ROOT %d = bf16[8,4] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, "
                          "rhs_contract={1}\n"),
              {random_literal("bf16[8,256]", 20, 0, 2), random_literal("bf16[4,256]", 21, 0, 2)});
  expect_same("f32 x f32 -> f64",
              module_text("  %a = f32[3,5] parameter(), index=0\n  %b = f32[5,2] parameter(), index=1\n",
                          "  ROOT %d = f64[3,2] dot_general(%a, %b), lhs_batch={}, lhs_contract={1}, rhs_batch={}, "
                          "rhs_contract={0}\n"),
              {random_literal("f32[3,5]", 22, -2, 2), random_literal("f32[5,2]", 23, -2, 2)});
  expect_same("s32 dot, two batch dims",
              module_text("  %a = s32[2,3,4,5] parameter(), index=0\n  %b = s32[3,2,5,6] parameter(), index=1\n",
                          "  ROOT %d = s32[2,3,4,6] dot_general(%a, %b), lhs_batch={0,1}, lhs_contract={3}, "
                          "rhs_batch={1,0}, rhs_contract={2}\n"),
              {random_literal("s32[2,3,4,5]", 24, -9, 9), random_literal("s32[3,2,5,6]", 25, -9, 9)});
}

// ---- gather / scatter_add ----

TEST(LowerDataOps, GatherClampsOutOfRangeIndices) {
  expect_same("s32 indices in [-5, 12) of 7 rows, bf16",
              module_text("  %x = bf16[7,16] parameter(), index=0\n  %i = s32[3,5] parameter(), index=1\n",
                          "  ROOT %g = bf16[3,5,16] gather(%x, %i), axis=0\n"),
              {random_literal("bf16[7,16]", 26, -2, 2), random_literal("s32[3,5]", 27, -5, 12)});
  // u32 indices above 2^31 must clamp to the last row, not wrap to a negative s32.
  expect_same("huge u32 indices",
              module_text("  %x = f32[2,4,3] parameter(), index=0\n  %i = u32[5] parameter(), index=1\n",
                          "  ROOT %g = f32[2,5,3] gather(%x, %i), axis=1\n"),
              {random_literal("f32[2,4,3]", 28, -2, 2), literal("u32[5]", {0, 3, 4, 2147483648.0, 4294967295.0})});
  expect_same("two batch dims, a dim before the axis, indices of rank 3",
              module_text("  %x = f32[2,3,4,6,5] parameter(), index=0\n  %i = s32[2,3,2,2] parameter(), index=1\n",
                          "  ROOT %g = f32[2,3,4,2,2,5] gather(%x, %i), axis=3, batch_dims=2\n"),
              {random_literal("f32[2,3,4,6,5]", 29, -2, 2), random_literal("s32[2,3,2,2]", 30, -2, 8)});
  expect_same("nothing to gather from an empty axis",
              module_text("  %x = f32[2,0,3] parameter(), index=0\n  %i = s32[0] parameter(), index=1\n",
                          "  ROOT %g = f32[2,0,3] gather(%x, %i), axis=1\n"),
              {literal("f32[2,0,3]", {}), literal("s32[0]", {})});
  expect_same("scalar index",
              module_text("  %x = f32[4,3] parameter(), index=0\n  %i = s32[] parameter(), index=1\n",
                          "  ROOT %g = f32[3] gather(%x, %i), axis=0\n"),
              {random_literal("f32[4,3]", 31, -2, 2), literal("s32[]", {2})});
}

TEST(LowerDataOps, ScatterAddSkipsOutOfRangeAndAccumulatesDuplicates) {
  expect_same("duplicates and out-of-range s32 indices",
              module_text("  %x = f32[6,8] parameter(), index=0\n  %i = s32[40] parameter(), index=1\n"
                          "  %u = f32[40,8] parameter(), index=2\n",
                          "  ROOT %s = f32[6,8] scatter_add(%x, %i, %u), axis=0\n"),
              {random_literal("f32[6,8]", 32, -2, 2), random_literal("s32[40]", 33, -3, 9),
               random_literal("f32[40,8]", 34, -2, 2)});
  expect_same("huge u32 indices are skipped",
              module_text("  %x = f32[4,2] parameter(), index=0\n  %i = u32[5] parameter(), index=1\n"
                          "  %u = f32[5,2] parameter(), index=2\n",
                          "  ROOT %s = f32[4,2] scatter_add(%x, %i, %u), axis=0\n"),
              {random_literal("f32[4,2]", 35, -2, 2), literal("u32[5]", {1, 4, 2147483648.0, 4294967295.0, 1}),
               random_literal("f32[5,2]", 36, -2, 2)});
  // 512 bf16 updates into 4 rows: summed in bf16 step by step this would drift past 1e-2.
  expect_same("bf16 with many duplicates",
              module_text("  %x = bf16[4,3] parameter(), index=0\n  %i = s32[512] parameter(), index=1\n"
                          "  %u = bf16[512,3] parameter(), index=2\n",
                          "  ROOT %s = bf16[4,3] scatter_add(%x, %i, %u), axis=0\n"),
              {random_literal("bf16[4,3]", 37, -2, 2), random_literal("s32[512]", 38, 0, 4),
               random_literal("bf16[512,3]", 39, 0, 1)});
  expect_same("two batch dims and a dim before the axis",
              module_text("  %x = f32[2,3,4,6,5] parameter(), index=0\n  %i = s32[2,3,7] parameter(), index=1\n"
                          "  %u = f32[2,3,4,7,5] parameter(), index=2\n",
                          "  ROOT %s = f32[2,3,4,6,5] scatter_add(%x, %i, %u), axis=3, batch_dims=2\n"),
              {random_literal("f32[2,3,4,6,5]", 40, -2, 2), random_literal("s32[2,3,7]", 41, -1, 7),
               random_literal("f32[2,3,4,7,5]", 42, -2, 2)});
  expect_same("s32 values",
              module_text("  %x = s32[5] parameter(), index=0\n  %i = s32[9] parameter(), index=1\n"
                          "  %u = s32[9] parameter(), index=2\n",
                          "  ROOT %s = s32[5] scatter_add(%x, %i, %u), axis=0\n"),
              {random_literal("s32[5]", 43, -9, 9), random_literal("s32[9]", 44, -1, 6),
               random_literal("s32[9]", 45, -9, 9)});
}

// ---- sort / topk ----

// Rows of small integers (many ties), NaN, +-0 and infinities: equal keys keep index order,
// NaN is above +inf, -0 ties with +0.
Literal tricky_row_values(const std::string& shape, uint64_t seed) {
  Literal x = random_literal(shape, seed, -3, 3, /*ties=*/true);
  std::vector<double>& v = x.mutable_values();
  const size_t n = v.size();
  v[1 % n] = kNaN;
  v[4 % n] = -0.0;
  v[5 % n] = 0.0;
  v[7 % n] = kInf;
  v[9 % n] = -kInf;
  v[11 % n] = kNaN;
  v[12 % n] = -kNaN;
  return x;
}

std::string ordering_text(const std::string& x, const std::string& result, const std::string& op) {
  return module_text(fmt::format("  %x = {} parameter(), index=0\n", x), fmt::format("  ROOT %t = {} {}\n", result, op));
}

TEST(LowerDataOps, SortIsStableWithNaNLargest) {
  for (int descending : {0, 1}) {
    expect_same(fmt::format("f32 sort descending={}", descending),
                ordering_text("f32[3,16]", "(f32[3,16], s32[3,16])", fmt::format("sort(%x), descending={}", descending)),
                {tricky_row_values("f32[3,16]", 46)});
    expect_same(fmt::format("bf16 sort descending={}", descending),
                ordering_text("bf16[2,3,40]", "(bf16[2,3,40], s32[2,3,40])",
                              fmt::format("sort(%x), descending={}", descending)),
                {tricky_row_values("bf16[2,3,40]", 47)});
    expect_same(fmt::format("s32 sort descending={}", descending),
                ordering_text("s32[4,33]", "(s32[4,33], s32[4,33])", fmt::format("sort(%x), descending={}", descending)),
                {random_literal("s32[4,33]", 48, -4, 4)});
    expect_same(fmt::format("u32 sort descending={}", descending),
                ordering_text("u32[50]", "(u32[50], s32[50])", fmt::format("sort(%x), descending={}", descending)),
                {random_literal("u32[50]", 49, 0, 6)});
  }
  expect_same("empty rows", ordering_text("f32[3,0]", "(f32[3,0], s32[3,0])", "sort(%x), descending=0"),
              {literal("f32[3,0]", {})});
  expect_same("long f32 rows", ordering_text("f32[2,1000]", "(f32[2,1000], s32[2,1000])", "sort(%x), descending=1"),
              {random_literal("f32[2,1000]", 50, -20, 20, /*ties=*/true)});
}

TEST(LowerDataOps, TopKTakesLowerIndicesFirstAmongTies) {
  for (int k : {1, 3, 8, 16}) {
    expect_same(fmt::format("f32 topk k={}", k),
                ordering_text("f32[4,16]", fmt::format("(f32[4,{0}], s32[4,{0}])", k), fmt::format("topk(%x), k={}", k)),
                {tricky_row_values("f32[4,16]", 51 + k)});
  }
  expect_same("bf16 router topk", ordering_text("bf16[64,32]", "(bf16[64,4], s32[64,4])", "topk(%x), k=4"),
              {random_literal("bf16[64,32]", 70, -1, 1)});
  expect_same("s32 topk with ties", ordering_text("s32[3,20]", "(s32[3,5], s32[3,5])", "topk(%x), k=5"),
              {random_literal("s32[3,20]", 71, 0, 3)});
}

}  // namespace
}  // namespace kiln::backend::pjrt
