// The collective, ragged all-to-all and grouped matmul lowerings on XLA's CPU plugin against
// the reference interpreter, beyond the registry examples (which run on one device): every
// collective on 4-device meshes (groups along one axis, along both, in both axis orders, and
// of one device), the async pairs, ragged exchanges with uneven, empty, negative and cut
// blocks, and grouped matmuls with empty groups, padding rows and non-finite values (both the
// masked dense form and the tiled one).
//
// Tolerances: exact for what only moves data (gathers, slices, ragged exchanges); expect_close's
// defaults for sums (1e-5 relative for f32 against the interpreter's double sums, 1e-2 for
// bf16, whose sums run in f32 and round once on both sides).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "tests/backend/pjrt/pjrt_testing.h"

namespace kiln::backend::pjrt {
namespace {

using ir::Literal;
using testing::module_text;
using testing::parse;

constexpr double kExact = 0;

Literal literal(const std::string& shape_text, std::vector<double> values) {
  auto shape = ir::parse_shape(shape_text);
  KILN_CHECK(shape.ok()) << shape_text;
  return Literal(*shape, std::move(values));
}

Literal random_literal(const std::string& shape_text, uint64_t seed, double lo = -2, double hi = 2) {
  auto shape = ir::parse_shape(shape_text);
  KILN_CHECK(shape.ok()) << shape_text;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> values(shape->num_elements());
  for (double& v : values) v = ir::is_floating(shape->dtype()) ? u(rng) : std::floor(u(rng));
  return Literal(*shape, std::move(values));
}

config::Mesh fsdp_expert() { return config::Mesh({"fsdp", "expert"}, {2, 2}); }
config::Mesh data_tensor() { return config::Mesh({"data", "tensor"}, {2, 2}); }

// Runs `text` on every device of `mesh` on the plugin and on the interpreter and compares;
// args[d] are device d's arguments (random, a different seed per device, when empty).
void expect_same(const std::string& what, const std::string& text, const config::Mesh& mesh,
                 std::vector<std::vector<Literal>> args = {}, double relative = -1,
                 bool tiled_grouped_matmul = false) {
  std::unique_ptr<ir::Module> module = parse(text);
  ASSERT_NE(module, nullptr);
  if (args.empty()) {
    for (int64_t d = 0; d < mesh.num_devices(); ++d) args.push_back(testing::random_args(*module, 100 + d));
  }
  EmitOptions options;
  options.mesh = mesh;
  options.tiled_grouped_matmul = tiled_grouped_matmul;
  auto want = testing::run_on_interpreter(*module, mesh, args);
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().message();
  auto got = testing::run_on_cpu_plugin(*module, options, args);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().message() << "\n" << text;
  testing::expect_close(*want, *got, what, relative);
}

std::string emit(const std::string& text, const EmitOptions& options) {
  std::unique_ptr<ir::Module> module = parse(text);
  if (module == nullptr) return "";
  auto emitted = emit_stablehlo(*module, options);
  EXPECT_TRUE(emitted.ok()) << emitted.status().message();
  return emitted.ok() ? *emitted : "";
}

// mesh_axes values: one axis, both, both in the other order (rank = row-major over the
// listed axes, so the chunk order changes).
const std::vector<std::string> kAxes = {"fsdp", "expert", "\"fsdp,expert\"", "\"expert,fsdp\""};
int64_t group_of(const std::string& axes) { return axes.find(',') != std::string::npos ? 4 : 2; }

// ---- the emitted text ----

// The backward pass's re-gather of a weight (passes/regather.h) goes through an optimization
// barrier, so XLA's CSE cannot merge it with the forward gather; the values are the same.
TEST(LowerCollectivesText, RegatherIsKeptApartFromTheForwardGather) {
  const std::string text = module_text(
      "  %x = f32[2,3] parameter(), index=0\n",
      "  %a = f32[4,3] all_gather(%x), dim=0, mesh_axes=fsdp, group_size=2\n"
      "  %b = f32[4,3] all_gather(%x), dim=0, mesh_axes=fsdp, group_size=2, name=\"all_gather.regather\"\n"
      "  ROOT %s = f32[4,3] mul(%a, %b)\n");
  EmitOptions options;
  options.mesh = fsdp_expert();
  const std::string emitted = emit(text, options);
  const size_t barrier = emitted.find("stablehlo.optimization_barrier");
  ASSERT_NE(barrier, std::string::npos) << emitted;
  EXPECT_EQ(emitted.find("stablehlo.optimization_barrier", barrier + 1), std::string::npos) << "one barrier";
  expect_same("regather", text, fsdp_expert());
}

TEST(LowerCollectivesText, ReplicaGroupsFollowTheMeshAndNoChannelHandle) {
  EmitOptions options;
  options.mesh = fsdp_expert();
  const std::string text = emit(module_text("  %x = f32[2,3] parameter(), index=0\n",
                                            "  %a = f32[2,3] all_reduce(%x), mesh_axes=fsdp, group_size=2\n"
                                            "  ROOT %g = f32[2,12] all_gather(%a), dim=1, mesh_axes=\"expert,fsdp\", "
                                            "group_size=4\n"),
                                options);
  EXPECT_NE(text.find("mhlo.num_replicas = 4"), std::string::npos) << text;
  // Devices are row-major over (fsdp, expert): the fsdp groups pair d with d + 2.
  EXPECT_NE(text.find("replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>"), std::string::npos) << text;
  // Ranked by expert first, then fsdp.
  EXPECT_NE(text.find("replica_groups = dense<[[0, 2, 1, 3]]> : tensor<1x4xi64>"), std::string::npos) << text;
  EXPECT_EQ(text.find("channel_handle"), std::string::npos) << text;
}

TEST(LowerCollectivesText, GroupOfOneIsTheIdentity) {
  EmitOptions options;
  options.mesh = config::Mesh({"data", "fsdp", "expert"}, {1, 2, 2});
  const std::string text = emit(module_text("  %x = f32[2,3] parameter(), index=0\n",
                                            "  %a = f32[2,3] all_reduce(%x), mesh_axes=data, group_size=1\n"
                                            "  ROOT %g = f32[2,3] all_gather(%a), dim=1, mesh_axes=data, group_size=1\n"),
                                options);
  EXPECT_EQ(text.find("stablehlo.all_"), std::string::npos) << text;
}

TEST(LowerCollectivesText, GroupSizeThatDisagreesWithTheMeshIsAnError) {
  std::unique_ptr<ir::Module> module = parse(module_text("  %x = f32[2,3] parameter(), index=0\n",
                                                         "  ROOT %a = f32[2,3] all_reduce(%x), mesh_axes=fsdp, group_size=4\n"));
  ASSERT_NE(module, nullptr);
  EmitOptions options;
  options.mesh = fsdp_expert();
  auto emitted = emit_stablehlo(*module, options);
  ASSERT_FALSE(emitted.ok());
  EXPECT_NE(emitted.status().message().find("group_size=4"), std::string::npos) << emitted.status().message();
}

TEST(LowerCollectivesText, Bf16SumsRunInF32) {
  EmitOptions options;
  options.mesh = fsdp_expert();
  const std::string text = emit(module_text("  %x = bf16[4,3] parameter(), index=0\n",
                                            "  ROOT %a = bf16[2,3] reduce_scatter(%x), dim=0, mesh_axes=expert, "
                                            "group_size=2\n"),
                                options);
  EXPECT_NE(text.find("\"stablehlo.reduce_scatter\"("), std::string::npos) << text;
  EXPECT_NE(text.find("scatter_dimension = 0 : i64"), std::string::npos) << text;
  EXPECT_NE(text.find("(tensor<4x3xf32>) -> tensor<2x3xf32>"), std::string::npos) << text;
}

// ---- all_gather, reduce_scatter, all_reduce, shard_slice on 4 devices ----

TEST(LowerCollectives, AllGatherOverEveryGroupAndDim) {
  for (const std::string& axes : kAxes) {
    const int64_t g = group_of(axes);
    for (int dim : {0, 1}) {
      const std::string out = dim == 0 ? fmt::format("f32[{},3]", 2 * g) : fmt::format("f32[2,{}]", 3 * g);
      expect_same(fmt::format("all_gather dim {} over {}", dim, axes),
                  module_text("  %x = f32[2,3] parameter(), index=0\n",
                              fmt::format("  ROOT %r = {} all_gather(%x), dim={}, mesh_axes={}, group_size={}\n", out,
                                          dim, axes, g)),
                  fsdp_expert(), {}, kExact);
    }
  }
}

TEST(LowerCollectives, ReduceScatterOverEveryGroupAndDim) {
  for (const std::string& axes : kAxes) {
    const int64_t g = group_of(axes);
    for (int dim : {0, 1}) {
      const std::string out = dim == 0 ? fmt::format("f32[{},8]", 8 / g) : fmt::format("f32[8,{}]", 8 / g);
      expect_same(fmt::format("reduce_scatter dim {} over {}", dim, axes),
                  module_text("  %x = f32[8,8] parameter(), index=0\n",
                              fmt::format("  ROOT %r = {} reduce_scatter(%x), dim={}, mesh_axes={}, group_size={}\n",
                                          out, dim, axes, g)),
                  fsdp_expert());
    }
  }
  expect_same("reduce_scatter bf16",
              module_text("  %x = bf16[4,6] parameter(), index=0\n",
                          "  ROOT %r = bf16[4,3] reduce_scatter(%x), dim=1, mesh_axes=tensor, group_size=2\n"),
              data_tensor());
}

TEST(LowerCollectives, AllReduceOfEveryDtype) {
  for (const std::string& axes : kAxes) {
    expect_same(fmt::format("all_reduce over {}", axes),
                module_text("  %x = f32[3,5] parameter(), index=0\n",
                            fmt::format("  ROOT %r = f32[3,5] all_reduce(%x), mesh_axes={}, group_size={}\n", axes,
                                        group_of(axes))),
                fsdp_expert());
  }
  for (const char* dtype : {"bf16", "s32", "f64"}) {
    expect_same(fmt::format("all_reduce {}", dtype),
                module_text(fmt::format("  %x = {}[4,3] parameter(), index=0\n", dtype),
                            fmt::format("  ROOT %r = {}[4,3] all_reduce(%x), mesh_axes=\"data,tensor\", group_size=4\n",
                                        dtype)),
                data_tensor());
  }
  // pred: the interpreter's sum rounded to pred is an OR.
  std::vector<std::vector<Literal>> bits;
  for (int d = 0; d < 4; ++d) bits.push_back({literal("pred[4]", {d == 1 ? 1.0 : 0.0, d == 3 ? 1.0 : 0.0, 0, 1})});
  expect_same("all_reduce pred",
              module_text("  %x = pred[4] parameter(), index=0\n",
                          "  ROOT %r = pred[4] all_reduce(%x), mesh_axes=data, group_size=2\n"),
              data_tensor(), bits, kExact);
}

TEST(LowerCollectives, ShardSliceTakesThisDevicesChunk) {
  for (const std::string& axes : kAxes) {
    const int64_t g = group_of(axes);
    for (int dim : {0, 1}) {
      const std::string out = dim == 0 ? fmt::format("f32[{},4]", 8 / g) : fmt::format("f32[8,{}]", 4 / g);
      expect_same(fmt::format("shard_slice dim {} over {}", dim, axes),
                  module_text("  %x = f32[8,4] parameter(), index=0\n",
                              fmt::format("  ROOT %r = {} shard_slice(%x), dim={}, mesh_axes={}, group_size={}\n", out,
                                          dim, axes, g)),
                  fsdp_expert(), {}, kExact);
    }
  }
}

// The partitioner's pairs: gather <-> scatter and the sums of tensor parallelism, in one
// program with groups along each axis and along both.
TEST(LowerCollectives, MixedProgramOnDataTimesTensor) {
  expect_same("mixed",
              module_text("  %x = f32[4,6] parameter(), index=0\n",
                          "  %s = f32[4,3] shard_slice(%x), dim=1, mesh_axes=tensor, group_size=2\n"
                          "  %e = f32[4,3] exp(%s)\n"
                          "  %g = f32[8,3] all_gather(%e), dim=0, mesh_axes=data, group_size=2\n"
                          "  %r = f32[2,3] reduce_scatter(%g), dim=0, mesh_axes=\"data,tensor\", group_size=4\n"
                          "  %a = f32[2,3] all_reduce(%r), mesh_axes=tensor, group_size=2\n"
                          "  ROOT %t = (f32[8,3], f32[2,3]) tuple(%g, %a)\n"),
              data_tensor());
}

TEST(LowerCollectives, AsyncPairsEqualTheirCollectives) {
  expect_same("async pairs",
              module_text("  %x = f32[4,6] parameter(), index=0\n",
                          "  %gs = f32[8,6] all_gather_start(%x), dim=0, mesh_axes=fsdp, group_size=2\n"
                          "  %rs = f32[4,3] reduce_scatter_start(%x), dim=1, mesh_axes=expert, group_size=2\n"
                          "  %as = f32[4,6] all_reduce_start(%x), mesh_axes=\"fsdp,expert\", group_size=4\n"
                          "  %n = f32[4,6] neg(%x)\n"
                          "  %gd = f32[8,6] all_gather_done(%gs, %x)\n"
                          "  %rd = f32[4,3] reduce_scatter_done(%rs, %x)\n"
                          "  %ad = f32[4,6] all_reduce_done(%as, %x)\n"
                          "  ROOT %t = (f32[8,6], f32[4,3], f32[4,6], f32[4,6]) tuple(%gd, %rd, %ad, %n)\n"),
              fsdp_expert());
}

// ---- ragged_all_to_all ----

// Per device [P=2, G=2] sizes: empty blocks, a block of every row, negative sizes, sums past
// `rows` (5) that cut the last block, and blocks longer than a slot of 2.
std::vector<Literal> ragged_sizes_g2() {
  return {literal("s32[2,2]", {2, 3, 0, 5}), literal("s32[2,2]", {5, 0, -1, 2}), literal("s32[2,2]", {1, 1, 4, 4}),
          literal("s32[2,2]", {0, 0, 3, 1})};
}

// Per device [P=1, G=4] sizes over a group of 4 (rows = 6).
std::vector<Literal> ragged_sizes_g4() {
  return {literal("s32[1,4]", {1, 0, 3, 2}), literal("s32[1,4]", {0, 6, 0, 0}), literal("s32[1,4]", {2, -3, 2, 9}),
          literal("s32[1,4]", {0, 0, 0, 1})};
}

std::vector<std::vector<Literal>> with_sizes(const std::string& x_shape, const std::vector<Literal>& sizes) {
  std::vector<std::vector<Literal>> args;
  for (size_t d = 0; d < sizes.size(); ++d) args.push_back({random_literal(x_shape, 40 + d), sizes[d]});
  return args;
}

std::string ragged_text(const std::string& x, const std::string& sizes, const std::string& out, const std::string& attrs) {
  return module_text(fmt::format("  %x = {} parameter(), index=0\n  %s = {} parameter(), index=1\n", x, sizes),
                     fmt::format("  ROOT %r = {} ragged_all_to_all(%x, %s), {}\n", out, attrs));
}

TEST(LowerRaggedAllToAll, DispatchOverOneAxis) {
  for (int slot : {5, 2}) {  // the worst case, and a capacity that drops rows
    expect_same(fmt::format("dispatch slot {}", slot),
                ragged_text("f32[2,5,3]", "s32[2,2]", fmt::format("f32[2,{},3]", 2 * slot),
                            fmt::format("group_size=2, rows=5, slot={}, reverse=0, mesh_axes=expert", slot)),
                fsdp_expert(), with_sizes("f32[2,5,3]", ragged_sizes_g2()), kExact);
  }
}

TEST(LowerRaggedAllToAll, ReturnOverOneAxis) {
  for (int slot : {5, 2}) {
    expect_same(fmt::format("return slot {}", slot),
                ragged_text(fmt::format("f32[2,{},3]", 2 * slot), "s32[2,2]", "f32[2,5,3]",
                            fmt::format("group_size=2, rows=5, slot={}, reverse=1, mesh_axes=fsdp", slot)),
                fsdp_expert(), with_sizes(fmt::format("f32[2,{},3]", 2 * slot), ragged_sizes_g2()), kExact);
  }
}

TEST(LowerRaggedAllToAll, BothAxesWithRowsOfSeveralDims) {
  expect_same("dispatch over both axes",
              ragged_text("bf16[1,6,2,3]", "s32[1,4]", "bf16[1,16,2,3]",
                          "group_size=4, rows=6, slot=4, reverse=0, mesh_axes=\"expert,fsdp\""),
              fsdp_expert(), with_sizes("bf16[1,6,2,3]", ragged_sizes_g4()), kExact);
  expect_same("return over both axes",
              ragged_text("bf16[1,16,2,3]", "s32[1,4]", "bf16[1,6,2,3]",
                          "group_size=4, rows=6, slot=4, reverse=1, mesh_axes=\"data,tensor\""),
              data_tensor(), with_sizes("bf16[1,16,2,3]", ragged_sizes_g4()), kExact);
}

// Dispatch then return brings every row that fit its slot back to where it was.
TEST(LowerRaggedAllToAll, RoundTripAndAsyncPair) {
  expect_same("round trip",
              module_text("  %x = f32[2,5,3] parameter(), index=0\n  %s = s32[2,2] parameter(), index=1\n",
                          "  %a = f32[2,8,3] ragged_all_to_all_start(%x, %s), group_size=2, rows=5, slot=4, reverse=0, "
                          "mesh_axes=expert\n"
                          "  %d = f32[2,8,3] ragged_all_to_all_done(%a, %x)\n"
                          "  %e = f32[2,8,3] exp(%d)\n"
                          "  ROOT %b = f32[2,5,3] ragged_all_to_all(%e, %s), group_size=2, rows=5, slot=4, reverse=1, "
                          "mesh_axes=expert\n"),
              fsdp_expert(), with_sizes("f32[2,5,3]", ragged_sizes_g2()));
}

// Without mesh_axes the exchange is between groups of consecutive entries of one device.
TEST(LowerRaggedAllToAll, GlobalFormStaysOnTheDevice) {
  std::vector<double> sizes = {2, 0, 5, 1, 1, 1, 7, -1, 0, 3, 3, 3, 0, 0, 0, 4, 2, 1};  // [6, 3]
  for (int reverse : {0, 1}) {
    const std::string x = reverse ? "f32[6,12,2]" : "f32[6,7,2]";
    const std::string out = reverse ? "f32[6,7,2]" : "f32[6,12,2]";
    std::vector<std::vector<Literal>> args;
    for (int d = 0; d < 4; ++d) args.push_back({random_literal(x, 70 + d), literal("s32[6,3]", sizes)});
    expect_same(fmt::format("global reverse={}", reverse),
                ragged_text(x, "s32[6,3]", out, fmt::format("group_size=3, rows=7, slot=4, reverse={}", reverse)),
                fsdp_expert(), args, kExact);
    expect_same(fmt::format("global reverse={} on one device", reverse),
                ragged_text(x, "s32[6,3]", out, fmt::format("group_size=3, rows=7, slot=4, reverse={}", reverse)),
                config::Mesh(), {args[0]}, kExact);
  }
}

// ---- grouped matmul ----

std::string gmm_text(const std::string& x, const std::string& w, const std::string& sizes, const std::string& out,
                     const std::string& attrs = "") {
  return module_text(fmt::format("  %x = {} parameter(), index=0\n  %w = {} parameter(), index=1\n"
                                 "  %s = {} parameter(), index=2\n",
                                 x, w, sizes),
                     fmt::format("  ROOT %y = {} grouped_matmul(%x, %w, %s){}\n", out, attrs));
}

std::string tgmm_text(const std::string& x, const std::string& dy, const std::string& sizes, const std::string& out,
                      const std::string& attrs = "") {
  return module_text(fmt::format("  %x = {} parameter(), index=0\n  %d = {} parameter(), index=1\n"
                                 "  %s = {} parameter(), index=2\n",
                                 x, dy, sizes),
                     fmt::format("  ROOT %y = {} grouped_matmul_weight_grad(%x, %d, %s){}\n", out, attrs));
}

// Both lowerings XLA:CPU runs: the masked dense product and the loop over row tiles (the GPU
// form, EmitOptions::tiled_grouped_matmul).
void expect_same_one_device(const std::string& what, const std::string& text, std::vector<Literal> args,
                            double relative = -1) {
  for (bool tiled : {false, true}) {
    expect_same(what + (tiled ? " (tiled)" : " (dense)"), text, config::Mesh(), {args}, relative, tiled);
  }
}

TEST(LowerGroupedMatmul, UnevenGroupsEmptyGroupsAndPaddingRows) {
  // 29 of 37 rows in groups (two empty), 8 padding rows.
  expect_same_one_device("gmm padding", gmm_text("f32[37,16]", "f32[5,16,12]", "s32[5]", "f32[37,12]"),
                         {random_literal("f32[37,16]", 1), random_literal("f32[5,16,12]", 2),
                          literal("s32[5]", {7, 0, 13, 0, 9})});
  // A negative size, and a sum past the rows that cuts the last group.
  expect_same_one_device("gmm cut, transpose_rhs",
                         gmm_text("f32[41,8]", "f32[3,6,8]", "s32[3]", "f32[41,6]", ", transpose_rhs=1"),
                         {random_literal("f32[41,8]", 3), random_literal("f32[3,6,8]", 4),
                          literal("s32[3]", {-3, 20, 30})});
  expect_same_one_device("gmm bf16 into f32",
                         gmm_text("bf16[33,24]", "bf16[4,24,10]", "s32[4]", "f32[33,10]"),
                         {random_literal("bf16[33,24]", 5), random_literal("bf16[4,24,10]", 6),
                          literal("s32[4]", {0, 11, 0, 22})});
  expect_same_one_device("gmm bf16", gmm_text("bf16[33,24]", "bf16[4,24,10]", "s32[4]", "bf16[33,10]"),
                         {random_literal("bf16[33,24]", 7), random_literal("bf16[4,24,10]", 8),
                          literal("s32[4]", {9, 9, 9, 9})});
  expect_same_one_device("gmm f64", gmm_text("f64[12,5]", "f64[3,5,4]", "s32[3]", "f64[12,4]"),
                         {random_literal("f64[12,5]", 9), random_literal("f64[3,5,4]", 10),
                          literal("s32[3]", {4, 4, 3})});
}

TEST(LowerGroupedMatmul, BatchedEntriesOverExpertBlocks) {
  // 4 entries, 6 experts in blocks of 3 (entries 0, 2 use experts 0-2; 1, 3 use 3-5).
  const Literal sizes = literal("s32[4,3]", {3, 0, 4, 9, 0, 0, 0, 0, 0, 2, -1, 5});
  expect_same_one_device("batched gmm", gmm_text("f32[4,9,8]", "f32[6,8,5]", "s32[4,3]", "f32[4,9,5]"),
                         {random_literal("f32[4,9,8]", 11), random_literal("f32[6,8,5]", 12), sizes});
  expect_same_one_device("batched gmm transpose_rhs",
                         gmm_text("f32[4,9,8]", "f32[6,5,8]", "s32[4,3]", "f32[4,9,5]", ", transpose_rhs=1"),
                         {random_literal("f32[4,9,8]", 13), random_literal("f32[6,5,8]", 14), sizes});
  expect_same_one_device("batched gmm one block", gmm_text("bf16[4,9,8]", "bf16[3,8,5]", "s32[4,3]", "bf16[4,9,5]"),
                         {random_literal("bf16[4,9,8]", 15), random_literal("bf16[3,8,5]", 16), sizes});
  expect_same_one_device("batched tgmm",
                         tgmm_text("f32[4,9,8]", "f32[4,9,5]", "s32[4,3]", "f32[6,8,5]", ", num_groups=6"),
                         {random_literal("f32[4,9,8]", 17), random_literal("f32[4,9,5]", 18), sizes});
  expect_same_one_device("batched tgmm bf16 one block",
                         tgmm_text("bf16[4,9,8]", "bf16[4,9,5]", "s32[4,3]", "bf16[3,8,5]", ", num_groups=3"),
                         {random_literal("bf16[4,9,8]", 19), random_literal("bf16[4,9,5]", 20), sizes});
}

TEST(LowerGroupedMatmul, WeightGradPerGroup) {
  expect_same_one_device("tgmm padding", tgmm_text("f32[37,16]", "f32[37,12]", "s32[5]", "f32[5,16,12]"),
                         {random_literal("f32[37,16]", 21), random_literal("f32[37,12]", 22),
                          literal("s32[5]", {7, 0, 13, 0, 9})});
  expect_same_one_device("tgmm cut", tgmm_text("f32[41,8]", "f32[41,6]", "s32[3]", "f32[3,8,6]"),
                         {random_literal("f32[41,8]", 23), random_literal("f32[41,6]", 24),
                          literal("s32[3]", {-3, 20, 30})});
  expect_same_one_device("tgmm bf16 into f32", tgmm_text("bf16[33,24]", "bf16[33,10]", "s32[4]", "f32[4,24,10]"),
                         {random_literal("bf16[33,24]", 25), random_literal("bf16[33,10]", 26),
                          literal("s32[4]", {0, 11, 0, 22})});
  expect_same_one_device("tgmm sizes as data", tgmm_text("f32[20,6]", "f32[20,7]", "s32[6]", "f32[6,6,7]"),
                         {random_literal("f32[20,6]", 27), random_literal("f32[20,7]", 28),
                          random_literal("s32[6]", 29, -2, 8)});
}

// A NaN or infinity touches only its own group's results, as in the reference.
TEST(LowerGroupedMatmul, NonFiniteValuesStayInTheirGroup) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Literal x = random_literal("f32[6,2]", 31);
  Literal w = random_literal("f32[3,2,2]", 32);
  std::vector<double> xv = x.values(), wv = w.values();
  xv[5 * 2] = nan;  // padding row 5
  xv[0] = inf;      // row 0, group 0
  wv[2 * 4] = inf;  // group 2 (empty)
  const Literal sizes = literal("s32[3]", {2, 3, 0});
  expect_same_one_device("gmm non-finite",
                         gmm_text("f32[6,2]", "f32[3,2,2]", "s32[3]", "f32[6,2]"),
                         {literal("f32[6,2]", xv), literal("f32[3,2,2]", wv), sizes});
  expect_same_one_device("tgmm non-finite", tgmm_text("f32[6,2]", "f32[6,2]", "s32[3]", "f32[3,2,2]"),
                         {literal("f32[6,2]", xv), random_literal("f32[6,2]", 33), sizes});
}

// The tiled form's tiles: T = 8 rows below 64 rows per group, up to 256 for long groups; groups
// of many tiles, a group that ends inside the last window (M - T), no rows at all, every row in
// one group, fewer rows than 8 (T = M), and batched entries whose groups straddle tiles.
TEST(LowerGroupedMatmul, TiledFormOverManyTilesPerGroup) {
  // 300 rows, 2 groups: T = 32; 100 + 187 rows (4 and 6 tiles), 13 padding rows.
  expect_same_one_device("tiles of 32", gmm_text("f32[300,8]", "f32[2,8,6]", "s32[2]", "f32[300,6]"),
                         {random_literal("f32[300,8]", 41), random_literal("f32[2,8,6]", 42),
                          literal("s32[2]", {100, 187})});
  expect_same_one_device("tiles of 32, weight grad", tgmm_text("f32[300,8]", "f32[300,6]", "s32[2]", "f32[2,8,6]"),
                         {random_literal("f32[300,8]", 43), random_literal("f32[300,6]", 44),
                          literal("s32[2]", {100, 187})});
  expect_same_one_device("every row in one group, bf16",
                         gmm_text("bf16[70,16]", "bf16[3,12,16]", "s32[3]", "bf16[70,12]", ", transpose_rhs=1"),
                         {random_literal("bf16[70,16]", 45), random_literal("bf16[3,12,16]", 46),
                          literal("s32[3]", {0, 70, 0})});
  expect_same_one_device("no rows", gmm_text("f32[20,4]", "f32[3,4,5]", "s32[3]", "f32[20,5]"),
                         {random_literal("f32[20,4]", 47), random_literal("f32[3,4,5]", 48),
                          literal("s32[3]", {0, -1, 0})});
  expect_same_one_device("no rows, weight grad", tgmm_text("f32[20,4]", "f32[20,5]", "s32[3]", "f32[3,4,5]"),
                         {random_literal("f32[20,4]", 49), random_literal("f32[20,5]", 50),
                          literal("s32[3]", {0, -1, 0})});
  expect_same_one_device("fewer rows than a tile", gmm_text("f32[5,4]", "f32[2,4,3]", "s32[2]", "f32[5,3]"),
                         {random_literal("f32[5,4]", 51), random_literal("f32[2,4,3]", 52), literal("s32[2]", {2, 2})});
  const Literal sizes = literal("s32[4,3]", {11, 0, 20, 40, 0, 0, 0, 0, 0, 9, 17, 14});
  expect_same_one_device("batched, tiles of 8",
                         gmm_text("bf16[4,40,8]", "bf16[6,8,5]", "s32[4,3]", "f32[4,40,5]"),
                         {random_literal("bf16[4,40,8]", 53), random_literal("bf16[6,8,5]", 54), sizes});
  expect_same_one_device("batched weight grad, tiles of 8",
                         tgmm_text("bf16[4,40,8]", "bf16[4,40,5]", "s32[4,3]", "f32[6,8,5]", ", num_groups=6"),
                         {random_literal("bf16[4,40,8]", 55), random_literal("bf16[4,40,5]", 56), sizes});
}

// The tiled form is one while loop of [T, K] x [K, N] products: no tensor with both the
// experts and the rows (the masked dense form's [M, G, N]), bf16 kept as the mixed dot where
// the plugin runs it.
TEST(LowerGroupedMatmulText, TiledFormIsALoopOfTileProducts) {
  EmitOptions options;
  options.ragged_dot = true;  // the tiled form takes precedence
  options.tiled_grouped_matmul = true;
  options.mixed_precision_dot = true;
  const std::string gmm = emit(gmm_text("bf16[1024,64]", "bf16[4,64,48]", "s32[4]", "bf16[1024,48]"), options);
  EXPECT_NE(gmm.find("\"stablehlo.while\""), std::string::npos) << gmm;
  EXPECT_EQ(gmm.find("chlo.ragged_dot"), std::string::npos) << gmm;
  // T = 64 (1024 rows over 4 groups): one bf16 [64, 64] x [64, 48] -> f32 product per trip.
  EXPECT_NE(gmm.find("(tensor<64x64xbf16>, tensor<64x48xbf16>) -> tensor<64x48xf32>"), std::string::npos) << gmm;
  EXPECT_EQ(gmm.find("1024x4x48"), std::string::npos) << gmm;
  const std::string tgmm = emit(tgmm_text("bf16[1024,64]", "bf16[1024,48]", "s32[4]", "bf16[4,64,48]"), options);
  EXPECT_NE(tgmm.find("(tensor<64x64xbf16>, tensor<64x48xbf16>) -> tensor<64x48xf32>"), std::string::npos) << tgmm;
  EXPECT_EQ(tgmm.find("4x1024"), std::string::npos) << tgmm;
}

// chlo.ragged_dot is for GPU and TPU plugins; XLA:CPU cannot run it, so only its text is checked.
TEST(LowerGroupedMatmulText, RaggedDotWhenThePluginHasIt) {
  EmitOptions options;
  options.ragged_dot = true;
  const std::string gmm = emit(gmm_text("bf16[37,16]", "bf16[5,16,12]", "s32[5]", "bf16[37,12]"), options);
  EXPECT_NE(gmm.find("\"chlo.ragged_dot\"("), std::string::npos) << gmm;
  EXPECT_NE(gmm.find("ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], "
                     "rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], "
                     "lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>"),
            std::string::npos)
      << gmm;
  EXPECT_NE(gmm.find("(tensor<37x16xbf16>, tensor<5x16x12xbf16>, tensor<5xi32>) -> tensor<37x12xf32>"), std::string::npos)
      << gmm;
  EXPECT_EQ(gmm.find("dot_general"), std::string::npos) << gmm;

  const std::string tgmm = emit(tgmm_text("f32[37,16]", "f32[37,12]", "s32[5]", "f32[5,16,12]"), options);
  EXPECT_NE(tgmm.find("lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0], lhs_ragged_dimensions = [0], "
                      "rhs_group_dimensions = []"),
            std::string::npos)
      << tgmm;
  EXPECT_NE(tgmm.find("#chlo<precision HIGHEST>"), std::string::npos) << tgmm;

  const std::string batched = emit(gmm_text("f32[4,9,8]", "f32[6,5,8]", "s32[4,3]", "f32[4,9,5]", ", transpose_rhs=1"),
                                   options);
  EXPECT_NE(batched.find("lhs_batching_dimensions = [1], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [3], "
                         "rhs_contracting_dimensions = [3], lhs_ragged_dimensions = [2], rhs_group_dimensions = [1]"),
            std::string::npos)
      << batched;
  EXPECT_NE(batched.find("(tensor<2x2x9x8xf32>, tensor<2x3x5x8xf32>, tensor<2x2x3xi32>) -> tensor<2x2x9x5xf32>"),
            std::string::npos)
      << batched;

  const std::string batched_grad =
      emit(tgmm_text("f32[4,9,8]", "f32[4,9,5]", "s32[4,3]", "f32[6,8,5]", ", num_groups=6"), options);
  EXPECT_NE(batched_grad.find("(tensor<4x9x8xf32>, tensor<4x9x5xf32>, tensor<4x3xi32>) -> tensor<3x4x8x5xf32>"),
            std::string::npos)
      << batched_grad;
}

// XLA:CPU compiles the text as far as its code emitter: the CHLO verifier and the conversion
// to HLO's ragged-dot accept each form (dimension numbers, group sizes' shape, result type).
// Should a CPU plugin run ragged-dot one day, its results must be the interpreter's.
TEST(LowerGroupedMatmulText, RaggedDotFormsReachXlasCodeEmitter) {
  EmitOptions options;
  options.ragged_dot = true;
  const std::vector<std::pair<std::string, Literal>> cases = {
      {gmm_text("bf16[12,8]", "bf16[3,8,5]", "s32[3]", "bf16[12,5]"), literal("s32[3]", {4, 0, 5})},
      {gmm_text("f32[4,9,8]", "f32[6,5,8]", "s32[4,3]", "f32[4,9,5]", ", transpose_rhs=1"),
       literal("s32[4,3]", {3, 0, 4, 9, 0, 0, 0, 0, 0, 2, -1, 5})},
      {tgmm_text("f32[12,8]", "f32[12,5]", "s32[3]", "f32[3,8,5]"), literal("s32[3]", {4, 0, 5})},
      {tgmm_text("f32[4,9,8]", "f32[4,9,5]", "s32[4,3]", "f32[6,8,5]", ", num_groups=6"),
       literal("s32[4,3]", {3, 0, 4, 9, 0, 0, 0, 0, 0, 2, -1, 5})},
  };
  for (const auto& [text, sizes] : cases) {
    std::unique_ptr<ir::Module> module = parse(text);
    ASSERT_NE(module, nullptr);
    std::vector<Literal> args = testing::random_args(*module, 7);
    args[2] = sizes;
    auto got = testing::run_on_cpu_plugin(*module, options, {args});
    if (!got.ok()) {
      EXPECT_NE(got.status().message().find("`ragged-dot` is not supported by XLA:CPU"), std::string::npos)
          << got.status().message() << "\n" << text;
      continue;
    }
    auto want = testing::run_on_interpreter(*module, config::Mesh(), {args});
    ASSERT_TRUE(want.ok()) << want.status().message();
    testing::expect_close(*want, *got, text);
  }
}

}  // namespace
}  // namespace kiln::backend::pjrt
