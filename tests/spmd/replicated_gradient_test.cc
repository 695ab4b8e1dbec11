// A value that an op without a per-dimension rule produced whole (here a sort; in the step,
// the grouped matmul's expert-weight gradient) and that elementwise ops carry to a sharded
// update is split before those ops, not after: each device scales only its shard, and only
// the shard lives until the update.
#include <gtest/gtest.h>

#include "tests/spmd/partition_check.h"

namespace kiln::spmd {
namespace {

const char* kClippedUpdate = R"(module @update

ENTRY computation @main {
  %x = f32[4,6] parameter(), index=0
  %w = f32[4,6] parameter(), index=1
  %s = (f32[4,6], s32[4,6]) sort(%x), descending=1
  %g = f32[4,6] get_tuple_element(%s), index=0
  %half = f32[] constant(0.5)
  %hb = f32[4,6] broadcast(%half), dims={}
  %scaled = f32[4,6] mul(%g, %hb)
  %w2 = f32[4,6] sub(%w, %scaled)
  ROOT %r = (f32[4,6]) tuple(%w2)
}
)";

TEST(ReplicatedGradientTest, ElementwiseOpsOnAWholeGradientRunOnTheUpdatesShard) {
  ir::Sharding rows{{{"fsdp"}, {}}};
  PartitionCase c{kClippedUpdate, config::Mesh({"fsdp"}, {2}), {std::nullopt, rows}, {rows}};
  std::string text = check_partition_equivalent(c);
  EXPECT_NE(text.find("f32[2,6] mul("), std::string::npos) << text;  // the scaling runs on the shard
  EXPECT_EQ(count_in(text, "f32[4,6] mul("), 0) << text;
  EXPECT_EQ(count_in(text, "all_gather("), 0) << text;
}

// A broadcast of replicated values (a constant, a replicated bias) feeding a batch-split
// activation is made at the activation's split: each device writes its own [2, 3] of it,
// rather than the whole [4, 3] sliced afterwards.
const char* kBroadcastBias = R"(module @bias

ENTRY computation @main {
  %x = f32[4,3] parameter(), index=0
  %b = f32[3] parameter(), index=1
  %bb = f32[4,3] broadcast(%b), dims={1}
  %two = f32[] constant(2)
  %tb = f32[4,3] broadcast(%two), dims={}
  %y = f32[4,3] add(%x, %bb)
  %z = f32[4,3] mul(%y, %tb)
  ROOT %r = (f32[4,3]) tuple(%z)
}
)";

TEST(ReplicatedGradientTest, BroadcastsOfReplicatedValuesAreMadeAtTheirUsersSplit) {
  ir::Sharding rows{{{"fsdp"}, {}}};
  PartitionCase c{kBroadcastBias, config::Mesh({"fsdp"}, {2}), {rows, std::nullopt}, {rows}};
  std::string text = check_partition_equivalent(c);
  EXPECT_EQ(count_in(text, "shard_slice("), 0) << text;
  EXPECT_EQ(count_in(text, "all_"), 0) << text;
  EXPECT_EQ(count_in(text, "f32[2,3] broadcast("), 2) << text;
}

}  // namespace
}  // namespace kiln::spmd
