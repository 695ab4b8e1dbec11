// The SPMD partitioner, IR text in: the per-device program has the collectives the layouts
// call for, and running it on virtual devices (each with its shard of the arguments) gives
// the global program's results.
#include <random>

#include <gtest/gtest.h>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/spmd/partitioner.h"
#include "tests/spmd/partition_check.h"
#include "tests/testing/random_literals.h"

namespace kiln::spmd {
namespace {

ir::Sharding sh(std::vector<std::vector<std::string>> dims) { return ir::Sharding{std::move(dims)}; }

using Case = PartitionCase;

std::string check_equivalent(const Case& c, double tolerance = 1e-5) { return check_partition_equivalent(c, tolerance); }
int count(const std::string& text, const std::string& what) { return count_in(text, what); }

// A layer and its weight gradient: x [batch, embed] split over (data, fsdp), w [embed, mlp]
// split over fsdp, updated in place.
const char* kLayerAndGradient = R"(module @layer

ENTRY computation @main {
  %x = f32[8,4] parameter(), index=0
  %w = f32[4,6] parameter(), index=1
  %h = f32[8,6] dot_general(%x, %w), lhs_batch={}, rhs_batch={}, lhs_contract={1}, rhs_contract={0}
  %t = f32[8,6] tanh(%h)
  %g = f32[4,6] dot_general(%x, %t), lhs_batch={}, rhs_batch={}, lhs_contract={0}, rhs_contract={0}
  %s = f32[] reduce_sum(%t), dims={0,1}
  %w2 = f32[4,6] add(%w, %g)
  ROOT %r = (f32[4,6], f32[]) tuple(%w2, %s)
}
)";

TEST(PartitionerTest, FsdpGathersWeightsAndReduceScattersTheirGradients) {
  Case c{kLayerAndGradient, config::Mesh({"data", "fsdp"}, {2, 2}), {sh({{"data", "fsdp"}, {}}), sh({{"fsdp"}, {}})},
         {sh({{"fsdp"}, {}}), std::nullopt}};
  std::string text = check_equivalent(c);
  EXPECT_EQ(count(text, "all_gather("), 1) << text;      // w before its matmul
  EXPECT_EQ(count(text, "reduce_scatter("), 1) << text;  // the gradient onto w's fsdp shard
  EXPECT_NE(text.find("all_reduce(%reduce_scatter"), std::string::npos) << text;  // data-parallel all-reduce of the shard
  EXPECT_NE(text.find("f32[2,4] parameter()"), std::string::npos) << text;  // x's local block
  EXPECT_NE(text.find("f32[2,6] parameter()"), std::string::npos) << text;  // w's local block
}

TEST(PartitionerTest, TensorParallelMatmulsAllReducePartialSums) {
  const char* ir = R"(module @mlp

ENTRY computation @main {
  %x = f32[4,8] parameter(), index=0
  %w1 = f32[8,6] parameter(), index=1
  %w2 = f32[6,8] parameter(), index=2
  %h = f32[4,6] dot_general(%x, %w1), lhs_batch={}, rhs_batch={}, lhs_contract={1}, rhs_contract={0}
  %a = f32[4,6] logistic(%h)
  %y = f32[4,8] dot_general(%a, %w2), lhs_batch={}, rhs_batch={}, lhs_contract={1}, rhs_contract={0}
  ROOT %r = f32[4,8] tanh(%y)
}
)";
  Case c{ir, config::Mesh({"fsdp", "tensor"}, {2, 2}), {sh({{"fsdp"}, {}}), sh({{}, {"tensor"}}), sh({{"tensor"}, {}})}, {}};
  std::string text = check_equivalent(c);
  EXPECT_EQ(count(text, "all_gather("), 0) << text;
  EXPECT_EQ(count(text, "all_reduce("), 1) << text;
  EXPECT_NE(text.find("mesh_axes=tensor"), std::string::npos) << text;
}

// An embedding table's gradient: the hidden-state gradient [B, T, D] split over the batch is
// scattered into zeros on each device (a partial sum over fsdp) and reduce-scattered onto the
// table's D split; the updates are never gathered, so the temporary does not grow with the
// device count. A table larger than the updates keeps gathering them (the smaller move).
const char* kEmbeddingGradient = R"(module @embedding_grad

ENTRY computation @main {
  %ids = s32[16,4] parameter(), index=0
  %g = f32[16,4,8] parameter(), index=1
  %w = f32[6,8] parameter(), index=2
  %zero = f32[] constant(0)
  %z = f32[6,8] broadcast(%zero), dims={}
  %dw = f32[6,8] scatter_add(%z, %ids, %g), axis=0, batch_dims=0
  %w2 = f32[6,8] sub(%w, %dw)
  ROOT %r = (f32[6,8]) tuple(%w2)
}
)";

TEST(PartitionerTest, AnEmbeddingGradientIsScatteredPerDeviceAndReduceScattered) {
  Case c{kEmbeddingGradient, config::Mesh({"fsdp"}, {4}),
         {sh({{"fsdp"}, {}}), sh({{"fsdp"}, {}, {}}), sh({{}, {"fsdp"}})}, {sh({{}, {"fsdp"}})}};
  std::string text = check_equivalent(c);
  EXPECT_EQ(count(text, "all_gather("), 0) << text;
  EXPECT_EQ(count(text, "reduce_scatter("), 1) << text;
  EXPECT_NE(text.find("f32[6,8] scatter_add("), std::string::npos) << text;  // the whole table, partial sums
  EXPECT_NE(text.find("f32[4,4,8] parameter()"), std::string::npos) << text;  // the updates stay split
}

TEST(PartitionerTest, AScatterIntoALargerTableGathersTheUpdates) {
  std::string ir = kEmbeddingGradient;
  for (auto [from, to] : {std::pair<std::string, std::string>{"f32[6,8]", "f32[600,8]"}}) {
    for (size_t at = ir.find(from); at != std::string::npos; at = ir.find(from, at + to.size())) {
      ir.replace(at, from.size(), to);
    }
  }
  Case c{ir, config::Mesh({"fsdp"}, {4}), {sh({{"fsdp"}, {}}), sh({{"fsdp"}, {}, {}}), sh({{}, {"fsdp"}})},
         {sh({{}, {"fsdp"}})}};
  std::string text = check_equivalent(c);
  EXPECT_EQ(count(text, "reduce_scatter("), 0) << text;
  EXPECT_GE(count(text, "all_gather("), 1) << text;
}

TEST(PartitionerTest, OpsWithoutARuleRunOnReplicatedValues) {
  const char* ir = R"(module @sorted

ENTRY computation @main {
  %x = f32[4,6] parameter(), index=0
  %s = (f32[4,6], s32[4,6]) sort(%x), descending=1
  %v = f32[4,6] get_tuple_element(%s), index=0
  ROOT %r = f32[4,6] exp(%v)
}
)";
  Case c{ir, config::Mesh({"data", "tensor"}, {2, 2}), {sh({{"data"}, {"tensor"}})}, {sh({{"data"}, {}})}};
  std::string text = check_equivalent(c);
  EXPECT_GE(count(text, "all_gather("), 1) << text;
}

TEST(PartitionerTest, OneDeviceMeshIsACopy) {
  Case c{kLayerAndGradient, config::Mesh(), {}, {}};
  std::string text = check_equivalent(c);
  EXPECT_EQ(count(text, "all_"), 0) << text;
  EXPECT_EQ(count(text, "reduce_scatter"), 0) << text;
}

TEST(ShardLiteralTest, AssembleInvertsShard) {
  config::Mesh mesh({"fsdp", "expert"}, {2, 2});
  std::mt19937_64 rng(3);
  ir::Literal x = testing::random_literal(ir::Shape(ir::DType::kF32, {4, 6}), rng, -1, 1);
  ir::Sharding s = sh({{"expert"}, {"fsdp"}});
  std::vector<ir::Literal> shards;
  for (int64_t d = 0; d < 4; ++d) shards.push_back(shard_literal(x, s, mesh, d));
  EXPECT_EQ(shards[1].shape().dims(), (std::vector<int64_t>{2, 3}));
  // Device 1 has fsdp=0, expert=1: rows 2..3, columns 0..2.
  EXPECT_EQ(shards[1].at(0), x.at(2 * 6 + 0));
  std::vector<const ir::Literal*> ptrs;
  for (const auto& l : shards) ptrs.push_back(&l);
  EXPECT_EQ(assemble_literal(ptrs, x.shape(), s, mesh), x);
}

}  // namespace
}  // namespace kiln::spmd
