// Attention and its gradient on a batch split over the mesh: each device runs them on its
// own rows (no all-gather of q, k, v), and the sink gradient, a sum over the batch, is
// all-reduced. The results equal the global program's.
#include <gtest/gtest.h>

#include "tests/spmd/partition_check.h"

namespace kiln::spmd {
namespace {

// B=4, T=S=3, H=2 query heads reading K=1 kv head, Dh=2; the gradient of a function of
// both outputs.
const char* kAttentionAndGradient = R"(module @attn

ENTRY computation @main {
  %q = f32[4,3,2,2] parameter(), index=0
  %k = f32[4,3,1,2] parameter(), index=1
  %v = f32[4,3,1,2] parameter(), index=2
  %sinks = f32[2] parameter(), index=3
  %a = (f32[4,3,2,2], f32[4,2,3]) attention(%q, %k, %v, %sinks), causal=1, scale=0.5
  %out = f32[4,3,2,2] get_tuple_element(%a), index=0
  %lse = f32[4,2,3] get_tuple_element(%a), index=1
  %dout = f32[4,3,2,2] tanh(%out)
  %dlse = f32[4,2,3] tanh(%lse)
  %g = (f32[4,3,2,2], f32[4,3,1,2], f32[4,3,1,2], f32[2]) attention_grad(%q, %k, %v, %sinks, %out, %lse, %dout, %dlse), causal=1, scale=0.5
  %dq = f32[4,3,2,2] get_tuple_element(%g), index=0
  %dk = f32[4,3,1,2] get_tuple_element(%g), index=1
  %dv = f32[4,3,1,2] get_tuple_element(%g), index=2
  %ds = f32[2] get_tuple_element(%g), index=3
  ROOT %r = (f32[4,3,2,2], f32[4,3,1,2], f32[4,3,1,2], f32[2], f32[4,2,3]) tuple(%dq, %dk, %dv, %ds, %lse)
}
)";

ir::Sharding batch4(const std::vector<std::string>& axes) { return ir::Sharding{{axes, {}, {}, {}}}; }

TEST(BatchTupleTest, AttentionRunsOnEachDevicesRowsAndSumsTheSinkGradient) {
  const std::vector<std::string> axes = {"data", "fsdp"};
  PartitionCase c{kAttentionAndGradient, config::Mesh({"data", "fsdp"}, {2, 2}),
                  {batch4(axes), batch4(axes), batch4(axes), std::nullopt},
                  {batch4(axes), batch4(axes), batch4(axes), std::nullopt, ir::Sharding{{axes, {}, {}}}}};
  std::string text = check_partition_equivalent(c);
  EXPECT_EQ(count_in(text, "all_gather("), 0) << text;
  EXPECT_EQ(count_in(text, "all_reduce("), 1) << text;  // the sink gradient
  EXPECT_NE(text.find("all_reduce(%get_tuple_element"), std::string::npos) << text;
  EXPECT_NE(text.find("(f32[1,3,2,2], f32[1,2,3]) attention("), std::string::npos) << text;
  EXPECT_NE(text.find("(f32[1,3,2,2], f32[1,3,1,2], f32[1,3,1,2], f32[2]) attention_grad("), std::string::npos)
      << text;
}

TEST(BatchTupleTest, ReplicatedBatchLeavesAttentionWhole) {
  PartitionCase c{kAttentionAndGradient, config::Mesh({"data", "fsdp"}, {2, 2}), {}, {}};
  std::string text = check_partition_equivalent(c);
  EXPECT_EQ(count_in(text, "all_"), 0) << text;
  EXPECT_NE(text.find("(f32[4,3,2,2], f32[4,2,3]) attention("), std::string::npos) << text;
}

TEST(BatchTupleTest, ReplicatedOperandsAreSlicedToTheSplitQuerysRows) {
  // q arrives split over fsdp, k, v and the sinks replicated: k and v are sliced locally
  // (no traffic) and the op runs on each device's half of the batch.
  PartitionCase c{kAttentionAndGradient, config::Mesh({"fsdp"}, {2}),
                  {batch4({"fsdp"}), std::nullopt, std::nullopt, std::nullopt}, {}};
  std::string text = check_partition_equivalent(c);
  EXPECT_GE(count_in(text, "shard_slice("), 2) << text;
  EXPECT_NE(text.find("(f32[2,3,2,2], f32[2,2,3]) attention("), std::string::npos) << text;
  EXPECT_NE(text.find("(f32[2,3,2,2], f32[2,3,1,2], f32[2,3,1,2], f32[2]) attention_grad("), std::string::npos)
      << text;
}

// The MoE's routing on a split batch: top-k over the router logits [B, T, E] and a stable
// sort of each shard's (token, slot) pairs by expert [P, n*k], then the rows gathered in
// that order; each device orders only its own rows (no all-gather), and the gradient (a
// scatter_add back through the indices) stays on the device too.
const char* kRouting = R"(module @route

ENTRY computation @main {
  %logits = f32[4,3,5] parameter(), index=0
  %experts = s32[4,6] parameter(), index=1
  %rows = f32[4,6,2] parameter(), index=2
  %t = (f32[4,3,2], s32[4,3,2]) topk(%logits), k=2
  %top = f32[4,3,2] get_tuple_element(%t), index=0
  %pick = s32[4,3,2] get_tuple_element(%t), index=1
  %s = (s32[4,6], s32[4,6]) sort(%experts), descending=0
  %order = s32[4,6] get_tuple_element(%s), index=1
  %grouped = f32[4,6,2] gather(%rows, %order), axis=1, batch_dims=1
  %u = (f32[4,3,5], s32[4,3,5]) sort(%logits), descending=1
  %desc = f32[4,3,5] get_tuple_element(%u), index=0
  ROOT %r = (f32[4,3,2], s32[4,3,2], s32[4,6], f32[4,6,2], f32[4,3,5]) tuple(%top, %pick, %order, %grouped, %desc)
}
)";

TEST(BatchTupleTest, SortAndTopKOrderEachDevicesOwnRows) {
  const std::vector<std::string> axes = {"data", "fsdp"};
  ir::Sharding rows3{{axes, {}, {}}}, rows2{{axes, {}}};
  PartitionCase c{kRouting, config::Mesh({"data", "fsdp"}, {2, 2}), {rows3, rows2, rows3}, {rows3, rows3, rows2, rows3, rows3}};
  std::string text = check_partition_equivalent(c);
  EXPECT_EQ(count_in(text, "all_"), 0) << text;
  EXPECT_NE(text.find("(f32[1,3,2], s32[1,3,2]) topk("), std::string::npos) << text;
  EXPECT_NE(text.find("(s32[1,6], s32[1,6]) sort("), std::string::npos) << text;
  EXPECT_NE(text.find("(f32[1,3,5], s32[1,3,5]) sort("), std::string::npos) << text;
}

TEST(BatchTupleTest, OneRowSortStaysWhole) {
  // A rank-1 sort orders its only dimension: a split one must be gathered first.
  const char* ir = R"(module @one

ENTRY computation @main {
  %x = s32[8] parameter(), index=0
  %s = (s32[8], s32[8]) sort(%x), descending=0
  ROOT %i = s32[8] get_tuple_element(%s), index=1
}
)";
  PartitionCase c{ir, config::Mesh({"fsdp"}, {2}), {ir::Sharding{{{"fsdp"}}}}, {}};
  std::string text = check_partition_equivalent(c);
  EXPECT_EQ(count_in(text, "all_gather("), 1) << text;
  EXPECT_NE(text.find("(s32[8], s32[8]) sort("), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::spmd
