// The compile pipeline (passes/compile_pipeline.h): the whole order for each backend policy
// and run choice, the checkpoint after the cleanups, and what a partitioned module looks
// like there (IR text in, collectives counted out).
#include "kiln/passes/compile_pipeline.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/ir/parser.h"
#include "kiln/ops/collective_bytes.h"

namespace kiln::passes {
namespace {

std::string order(const CompileChoices& choices, const BackendPolicy& policy) {
  Result<Pipeline> p = compile_pipeline(choices, policy);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? p->to_string() : "";
}

constexpr const char* kCleanups = "dce, fix(simplify, cse, dce), all_reduce_combiner, fix(simplify, cse, dce), reduce_scatter_reassociate, product_result_dtype";

TEST(CompilePipeline, TheCpuBackendsWholeOrder) {
  EXPECT_EQ(order({}, {}), std::string(kCleanups) +
                               ", remat, all_gather_combiner, reduce_scatter_combiner, fusion, multi_output_fusion, dce, "
                               "async_collectives");
}

TEST(CompilePipeline, RematRegathersAndUnfusedRunsHaveNoMultiOutputFusion) {
  CompileChoices full;
  full.remat_policy = "full";
  EXPECT_EQ(order(full, {}), std::string(kCleanups) +
                                 ", remat, regather, all_gather_combiner, reduce_scatter_combiner, fusion, "
                                 "multi_output_fusion, dce, async_collectives");
  CompileChoices unfused;
  unfused.fuse = false;
  EXPECT_EQ(order(unfused, {}), std::string(kCleanups) +
                                    ", remat, all_gather_combiner, reduce_scatter_combiner, fusion, dce, async_collectives");
}

TEST(CompilePipeline, ABackendWithoutLoopKernelsOrAsyncCollectivesGetsNeither) {
  BackendPolicy interpreter;
  interpreter.loop_fusion = false;
  interpreter.multi_output_fusion = false;
  interpreter.async_collectives = false;
  EXPECT_EQ(order({}, interpreter), std::string(kCleanups) + ", remat, all_gather_combiner, reduce_scatter_combiner");
  BackendPolicy sync;
  sync.async_collectives = false;
  EXPECT_EQ(order({}, sync), std::string(kCleanups) +
                                 ", remat, all_gather_combiner, reduce_scatter_combiner, fusion, multi_output_fusion, dce");
}

TEST(CompilePipeline, AnUnknownRematPolicyIsAnError) {
  CompileChoices bad;
  bad.remat_policy = "sometimes";
  Result<Pipeline> p = compile_pipeline(bad, {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("sometimes"), std::string::npos) << p.status().to_string();
}

// What a partitioner leaves: the same gather once per use, a slice of a value that is
// replicated anyway (dead after simplification), and the gradients' independent scalar
// all-reduces.
constexpr const char* kPartitioned = R"(module @m

ENTRY computation @main {
  %w = f32[4,3] parameter(), index=0
  %g = f32[5] parameter(), index=1
  %w1 = f32[8,3] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp
  %w2 = f32[8,3] all_gather(%w), dim=0, group_size=2, mesh_axes=fsdp
  %unused = f32[16,3] all_gather(%w1), dim=0, group_size=2, mesh_axes=fsdp
  %e1 = f32[8,3] exp(%w1)
  %e2 = f32[8,3] exp(%w2)
  %m = f32[8,3] mul(%e1, %e2)
  %s1 = f32[] reduce_sum(%m), dims={0,1}
  %s2 = f32[] reduce_sum(%g), dims={0}
  %a1 = f32[] all_reduce(%s1), group_size=2, mesh_axes=fsdp
  %a2 = f32[] all_reduce(%s2), group_size=2, mesh_axes=fsdp
  ROOT %t = (f32[], f32[]) tuple(%a1, %a2)
}
)";

TEST(CompilePipeline, AtTheCheckpointOnlyTheCollectivesThatWillRunAreLeft) {
  auto module = ir::parse_module(kPartitioned);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  EXPECT_EQ(ops::count_collectives(**module).at("all_gather").count, 3);
  BackendPolicy policy;
  policy.async_collectives = false;  // so that the end state names the same opcodes
  Result<Pipeline> p = compile_pipeline({}, policy);
  ASSERT_TRUE(p.ok());
  std::vector<std::string> seen;
  std::map<std::string, ops::CollectiveStats> at_checkpoint;
  Result<bool> changed = p->run(**module, [&](std::string_view name, const ir::Module& m) {
    seen.emplace_back(name);
    if (name == kCleanedCheckpoint) at_checkpoint = ops::count_collectives(m);
  });
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(seen, (std::vector<std::string>{"compacted", std::string(kCleanedCheckpoint)}));
  // One gather (the duplicate merged, the unused one gone), one all-reduce for both scalars.
  ASSERT_EQ(at_checkpoint.size(), 2u);
  EXPECT_EQ(at_checkpoint.at("all_gather").count, 1);
  EXPECT_EQ(at_checkpoint.at("all_gather").bytes, 8 * 3 * 4);
  EXPECT_EQ(at_checkpoint.at("all_reduce").count, 1);
}

}  // namespace
}  // namespace kiln::passes
