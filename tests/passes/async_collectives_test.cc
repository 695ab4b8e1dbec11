// AsyncCollectivesPass: IR text in and out; and on 4 virtual devices (data 2 x fsdp 2) the
// start/done pairs give the synchronous collectives' results bit for bit, interpreted and
// compiled (where the latency-hiding scheduler moves them apart and the kernels keep each
// collective in flight across the instructions between).
#include "kiln/passes/async_collectives.h"

#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "tests/passes/mesh_runner.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

TEST(AsyncCollectives, EachCollectiveBecomesAStartDonePair) {
  AsyncCollectivesPass pass;
  check_pass(pass, R"(module @m

ENTRY computation @main {
  %w = f32[2,3] parameter(), index=0
  %g = f32[2,3] all_gather(%w), dim=1, group_size=1, mesh_axes=fsdp, name="layers.0.w"
  %r = f32[2,3] reduce_scatter(%g), dim=0, group_size=1, mesh_axes=fsdp
  %a = f32[2,3] all_reduce(%r), group_size=1, mesh_axes=data
  ROOT %t = f32[2,3] tanh(%a)
}
)",
             R"(module @m

ENTRY computation @main {
  %w = f32[2,3] parameter(), index=0
  %all_gather_start.0 = f32[2,3] all_gather_start(%w), dim=1, group_size=1, mesh_axes=fsdp, name="layers.0.w"
  %all_gather_done.1 = f32[2,3] all_gather_done(%all_gather_start.0, %w), name="layers.0.w"
  %reduce_scatter_start.2 = f32[2,3] reduce_scatter_start(%all_gather_done.1), dim=0, group_size=1, mesh_axes=fsdp
  %reduce_scatter_done.3 = f32[2,3] reduce_scatter_done(%reduce_scatter_start.2, %all_gather_done.1)
  %all_reduce_start.4 = f32[2,3] all_reduce_start(%reduce_scatter_done.3), group_size=1, mesh_axes=data
  %all_reduce_done.5 = f32[2,3] all_reduce_done(%all_reduce_start.4, %reduce_scatter_done.3)
  ROOT %t = f32[2,3] tanh(%all_reduce_done.5)
}
)",
             true);
}

TEST(AsyncCollectives, CollectiveAtTheRootKeepsTheRoot) {
  AsyncCollectivesPass pass;
  check_pass(pass, R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  ROOT %a = f32[4] all_reduce(%x), group_size=1, mesh_axes=data
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %all_reduce_start.0 = f32[4] all_reduce_start(%x), group_size=1, mesh_axes=data
  ROOT %all_reduce_done.1 = f32[4] all_reduce_done(%all_reduce_start.0, %x)
}
)",
             true);
}

TEST(AsyncCollectives, LeavesAModuleWithoutCollectivesAlone) {
  AsyncCollectivesPass pass;
  const char* text = R"(module @m

ENTRY computation @main {
  %x = f32[4] parameter(), index=0
  %s = f32[4] shard_slice(%x), dim=0, group_size=1, mesh_axes=fsdp
  ROOT %t = f32[4] tanh(%s)
}
)";
  check_pass(pass, text, text, false);
}

// Per device: an FSDP weight gathered along an inner dimension (staged), a bf16 weight
// along the outer one (straight into the result), compute that does not need them, a weight
// gradient reduce-scattered along an inner dimension (packed) and then all-reduced over
// data, and a scalar summed over all four devices.
constexpr const char* kStep = R"(module @step

ENTRY computation @main {
  %w = f32[4,4] parameter(), index=0
  %x = f32[5,8] parameter(), index=1
  %v = f32[3,4] parameter(), index=2
  %g = f32[4,8] all_gather(%w), dim=1, group_size=2, mesh_axes=fsdp, name="layers.0.w"
  %vb = bf16[3,4] convert(%v)
  %gb = bf16[6,4] all_gather(%vb), dim=0, group_size=2, mesh_axes=fsdp, name="layers.1.v"
  %e = f32[5,8] exp(%x)
  %h = f32[5,4] dot_general(%e, %g), lhs_contract={1}, rhs_contract={1}, lhs_batch={}, rhs_batch={}
  %d = f32[8,4] dot_general(%x, %h), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %rs = f32[8,2] reduce_scatter(%d), dim=1, group_size=2, mesh_axes=fsdp
  %ar = f32[8,2] all_reduce(%rs), group_size=2, mesh_axes=data
  %t = f32[5,4] tanh(%h)
  %s = f32[] reduce_sum(%t), dims={0,1}
  %as = f32[] all_reduce(%s), group_size=4, mesh_axes="data,fsdp"
  ROOT %out = (f32[8,2], f32[], bf16[6,4], f32[5,4]) tuple(%ar, %as, %gb, %t)
}
)";

using testing::expect_identical;
using testing::Outputs;

// Runs `module` on the 4 devices of a data 2 x fsdp 2 mesh, each with its own inputs; a
// compiled executable runs twice (the second reuses the arena and the in-flight slots).
Outputs run_on_mesh(const ir::Module& module, bool compiled, bool async, backend::CompileReport* report = nullptr) {
  testing::MeshRun how;
  how.compiled = compiled;
  how.options.cache_dir = ::testing::TempDir() + "kiln_async_cache";
  how.options.async_collectives = async;
  how.seed = 40;
  how.runs = 2;
  how.report = report;
  return testing::run_on_mesh(config::Mesh({"data", "fsdp"}, {2, 2}), module, how);
}

TEST(AsyncCollectives, InterpretedPairsEqualSynchronousCollectivesOnFourDevices) {
  std::unique_ptr<ir::Module> sync = testing::parse_or_die(kStep);
  std::unique_ptr<ir::Module> async = sync->clone();
  AsyncCollectivesPass pass;
  ASSERT_TRUE(pass.run(*async).value());
  expect_identical(run_on_mesh(*sync, false, false), run_on_mesh(*async, false, false), "interpreted", "sync", "async");
}

TEST(AsyncCollectives, CompiledPairsEqualSynchronousCollectivesBitForBit) {
  std::unique_ptr<ir::Module> module = testing::parse_or_die(kStep);
  backend::CompileReport sync_report, async_report;
  Outputs sync = run_on_mesh(*module, true, false, &sync_report);
  Outputs async = run_on_mesh(*module, true, true, &async_report);
  expect_identical(sync, async, "compiled", "sync", "async");
  EXPECT_EQ(sync_report.async_collectives, 0);
  EXPECT_EQ(async_report.async_collectives, 5);
  EXPECT_EQ(async_report.async_by_kind.at("all_gather_start"), 2);
  EXPECT_EQ(async_report.async_by_kind.at("reduce_scatter_start"), 1);
  EXPECT_EQ(async_report.async_by_kind.at("all_reduce_start"), 2);
  // The gathers of w and v can start before exp and the convert run.
  EXPECT_GE(async_report.overlapped_collectives, 1);
  EXPECT_EQ(async_report.fallback_kernels, sync_report.fallback_kernels);
}

}  // namespace
}  // namespace kiln::passes
