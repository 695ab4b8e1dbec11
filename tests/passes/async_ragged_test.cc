// ragged_all_to_all as an async start/done pair: the async_collectives pass on IR text, and
// on virtual devices (expert 4; fsdp 2 x expert 2, exchanging over expert) a dispatch, the
// "expert compute", a return and a bf16 dispatch cut at a capacity, two entries per device,
// give the synchronous kernels' results bit for bit, interpreted and compiled (where the
// latency-hiding scheduler moves each start above independent compute).
#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/passes/async_collectives.h"
#include "tests/passes/mesh_runner.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

using testing::check_pass;

// (The global form, so that the interpreter can check the outputs without a mesh.)
TEST(AsyncRagged, RaggedAllToAllBecomesAStartDonePairThatKeepsItsRows) {
  AsyncCollectivesPass pass;
  check_pass(pass, R"(module @m

ENTRY computation @main {
  %x = f32[2,3,2] parameter(), index=0
  %sizes = s32[2,2] parameter(), index=1
  %d = f32[2,6,2] ragged_all_to_all(%x, %sizes), group_size=2, rows=3, slot=3, reverse=0, name="layers.0.mlp.dispatch"
  ROOT %t = f32[2,6,2] tanh(%d)
}
)",
             R"(module @m

ENTRY computation @main {
  %x = f32[2,3,2] parameter(), index=0
  %sizes = s32[2,2] parameter(), index=1
  %ragged_all_to_all_start.0 = f32[2,6,2] ragged_all_to_all_start(%x, %sizes), group_size=2, reverse=0, rows=3, slot=3, name="layers.0.mlp.dispatch"
  %ragged_all_to_all_done.1 = f32[2,6,2] ragged_all_to_all_done(%ragged_all_to_all_start.0, %x), name="layers.0.mlp.dispatch"
  ROOT %t = f32[2,6,2] tanh(%ragged_all_to_all_done.1)
}
)",
             true);
}

// Per device, G members in the exchange group, two entries: rows sent by sizes, neg as the
// expert compute (exact, so compiled and interpreted rows agree bit for bit), returned; a
// bf16 dispatch with a capacity of 2 rows per slot and its return; and a product that needs no exchange
// (what the start can overlap). Each return's rows come from its dispatch (same sizes,
// group and cut), so the compiled return sends back the counts that dispatch received
// instead of exchanging them; the interpreter always exchanges them.
std::string step_text(int64_t g) {
  return fmt::format(R"(module @step

ENTRY computation @main {{
  %x = f32[2,5,3] parameter(), index=0
  %sizes = s32[2,{0}] parameter(), index=1
  %y = f32[6,6] parameter(), index=2
  %rows = f32[2,5,3] neg(%x)
  %d = f32[2,{1},3] ragged_all_to_all(%rows, %sizes), group_size={0}, rows=5, slot=5, reverse=0, mesh_axes=expert
  %rb = bf16[2,5,3] convert(%x)
  %db = bf16[2,{2},3] ragged_all_to_all(%rb, %sizes), group_size={0}, rows=5, slot=2, reverse=0, mesh_axes=expert
  %bb = bf16[2,5,3] ragged_all_to_all(%db, %sizes), group_size={0}, rows=5, slot=2, reverse=1, mesh_axes=expert
  %a = f32[6,6] exp(%y)
  %p = f32[6,6] dot_general(%a, %y), lhs_contract={{1}}, rhs_contract={{0}}, lhs_batch={{}}, rhs_batch={{}}
  %e = f32[2,{1},3] neg(%d)
  %b = f32[2,5,3] ragged_all_to_all(%e, %sizes), group_size={0}, rows=5, slot=5, reverse=1, mesh_axes=expert
  ROOT %out = (f32[2,5,3], f32[2,{1},3], bf16[2,{2},3], bf16[2,5,3], f32[6,6]) tuple(%b, %d, %db, %bb, %p)
}}
)",
                     g, g * 5, g * 2);
}

using testing::expect_identical;
using testing::Outputs;

// Each device with its own inputs; a compiled executable runs twice (the second reuses the
// arena and the in-flight table).
Outputs run_on_mesh(const config::Mesh& mesh, const ir::Module& module, bool compiled, bool async,
                    backend::CompileReport* report = nullptr) {
  testing::MeshRun how;
  how.compiled = compiled;
  how.options.cache_dir = ::testing::TempDir() + "kiln_async_ragged_cache";
  how.options.async_collectives = async;
  how.runs = 2;
  how.report = report;
  return testing::run_on_mesh(mesh, module, how);
}

struct MeshCase {
  config::Mesh mesh;
  int64_t group;  // members of each exchange (the expert axis)
};

std::vector<MeshCase> meshes() {
  return {{config::Mesh({"expert"}, {4}), 4}, {config::Mesh({"fsdp", "expert"}, {2, 2}), 2}};
}

TEST(AsyncRagged, InterpretedPairsEqualTheSynchronousExchange) {
  for (const MeshCase& m : meshes()) {
    std::unique_ptr<ir::Module> sync = testing::parse_or_die(step_text(m.group));
    std::unique_ptr<ir::Module> async = sync->clone();
    AsyncCollectivesPass pass;
    ASSERT_TRUE(pass.run(*async).value());
    // Sizes drawn in [0, 4) per destination: blocks cut at rows=5 and, in bf16, at slot=2.
    expect_identical(run_on_mesh(m.mesh, *sync, false, false), run_on_mesh(m.mesh, *async, false, false),
                     "interpreted on " + m.mesh.to_string(), "sync", "async");
  }
}

TEST(AsyncRagged, CompiledPairsEqualTheSynchronousKernelBitForBit) {
  for (const MeshCase& m : meshes()) {
    std::unique_ptr<ir::Module> module = testing::parse_or_die(step_text(m.group));
    backend::CompileReport sync_report, async_report;
    Outputs sync = run_on_mesh(m.mesh, *module, true, false, &sync_report);
    Outputs async = run_on_mesh(m.mesh, *module, true, true, &async_report);
    const std::string what = "compiled on " + m.mesh.to_string();
    expect_identical(sync, async, what, "sync", "async");
    // The moved rows (not the product) equal the interpreter's, whose return exchanges counts.
    Outputs interpreted = run_on_mesh(m.mesh, *module, false, false);
    for (Outputs* o : {&interpreted, &async}) {
      for (auto& per_device : *o) per_device.pop_back();
    }
    expect_identical(interpreted, async, what + ", interpreted vs compiled", "interpreted", "compiled");
    // The exchange really happened: device 0's returned rows are not all zero.
    bool any = false;
    for (double v : async[0][0].values()) any = any || v != 0;
    EXPECT_TRUE(any) << what;
    EXPECT_EQ(sync_report.async_collectives, 0) << what;
    EXPECT_EQ(async_report.async_collectives, 4) << what;
    EXPECT_EQ(async_report.async_by_kind.at("ragged_all_to_all_start"), 4) << what;
    // The larger of operand and result (as the partitioner counts): 2 x G*5 x 3 f32 twice
    // (the dispatch's result, the return's operand), and twice bf16 2 x G*2 x 3 or 2 x 5 x 3.
    EXPECT_EQ(async_report.async_bytes_by_kind.at("ragged_all_to_all_start"),
              2 * (2 * m.group * 5 * 3 * 4) + 2 * std::max(2 * m.group * 2 * 3 * 2, int64_t{2 * 5 * 3 * 2}))
        << what;
    // Both dispatches start before the exp and the product that need no exchange.
    EXPECT_GE(async_report.overlapped_collectives, 2) << what;
    EXPECT_EQ(async_report.fallback_kernels, sync_report.fallback_kernels) << what;
  }
}

}  // namespace
}  // namespace kiln::passes
