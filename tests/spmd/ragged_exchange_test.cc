// The partitioner's rule for ragged_all_to_all (spmd/ragged_exchange.h): entries split one
// per device become the per-device exchange over the axes that number each group's
// members, with no gather of the rows; the per-device results equal the global program's.
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/spmd/partitioner.h"
#include "tests/testing/random_literals.h"

namespace kiln::spmd {
namespace {

// Dispatch 4 entries of 5 rows in groups of `G`, a function of the received rows, and the
// return: the MoE exchange's shape, with its gradient's structure (return of a dispatch).
std::string program(int64_t g) {
  return fmt::format(R"(module @exchange

ENTRY computation @main {{
  %x = f32[4,5,3] parameter(), index=0
  %sizes = s32[4,{0}] parameter(), index=1
  %y = f32[4,{1},3] ragged_all_to_all(%x, %sizes), group_size={0}, rows=5, slot=5, reverse=0
  %t = f32[4,{1},3] tanh(%y)
  %z = f32[4,5,3] ragged_all_to_all(%t, %sizes), group_size={0}, rows=5, slot=5, reverse=1
  ROOT %r = (f32[4,5,3], f32[4,{1},3]) tuple(%z, %y)
}}
)",
                     g, 5 * g);
}

struct Outcome {
  std::string text;  // the per-device program
};

Outcome check(const Mesh& mesh, int64_t g, const Axes& batch) {
  auto global = ir::parse_module(program(g));
  KILN_CHECK_OK(global);
  PartitionOptions options;
  options.mesh = mesh;
  options.seeds.params = {ir::Sharding{{batch, {}, {}}}, ir::Sharding{{batch, {}}}};
  auto result = partition(**global, options);
  KILN_CHECK_OK(result);
  Outcome o{ir::print_module(*result->module)};

  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> size(-1, 4);
  std::vector<double> sizes(4 * g);
  for (double& s : sizes) s = size(rng);
  std::vector<ir::Literal> args = {testing::random_literal(ir::Shape(ir::DType::kF32, {4, 5, 3}), rng, -1, 1),
                                   ir::Literal(ir::Shape(ir::DType::kS32, {4, g}), sizes)};
  auto want = interp::run(**global, args);
  KILN_CHECK_OK(want);

  const int64_t n = mesh.num_devices();
  runtime::LocalWorld world(n);
  std::vector<std::vector<ir::Literal>> outputs(n);
  KILN_CHECK_OK(runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::vector<ir::Literal> local;
    for (size_t i = 0; i < args.size(); ++i) local.push_back(shard_literal(args[i], result->param_shardings[i], mesh, d));
    KILN_ASSIGN_OR_RETURN(outputs[d], interp::run(*result->module, local));
    return ok_status();
  }));
  for (size_t i = 0; i < want->size(); ++i) {
    std::vector<const ir::Literal*> shards;
    for (int64_t d = 0; d < n; ++d) shards.push_back(&outputs[d][i]);
    ir::Literal got = assemble_literal(shards, (*want)[i].shape(), result->output_shardings[i], mesh);
    // Rows move unchanged; tanh of the same floats.
    EXPECT_EQ(got.values(), (*want)[i].values()) << "output " << i << "\n" << o.text;
  }
  return o;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(RaggedExchange, EntriesSplitOverExpertExchangeWithoutGathering) {
  Outcome o = check(Mesh({"expert"}, {4}), 4, {"expert"});
  EXPECT_EQ(count(o.text, "ragged_all_to_all("), 2) << o.text;
  EXPECT_EQ(count(o.text, "mesh_axes=expert"), 2) << o.text;
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
  const auto stats = count_collectives(*ir::parse_module(o.text).value());
  ASSERT_TRUE(stats.count("ragged_all_to_all"));
  EXPECT_EQ(stats.at("ragged_all_to_all").count, 2);
}

TEST(RaggedExchange, BatchOverFsdpAndExpertExchangesOverExpertOnly) {
  // Entry p = 2 * fsdp + expert: groups of 2 are the devices that share an fsdp coordinate.
  Outcome o = check(Mesh({"fsdp", "expert"}, {2, 2}), 2, {"fsdp", "expert"});
  EXPECT_EQ(count(o.text, "mesh_axes=expert"), 2) << o.text;
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
}

TEST(RaggedExchange, GroupsOfTheWholeBatchExchangeOverEveryBatchAxis) {
  Outcome o = check(Mesh({"fsdp", "expert"}, {2, 2}), 4, {"fsdp", "expert"});
  EXPECT_EQ(count(o.text, "mesh_axes=\"fsdp,expert\""), 2) << o.text;
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
}

TEST(RaggedExchange, LayoutsWithoutOneEntryPerDeviceRunReplicated) {
  // Entries split over fsdp only: two per device, so the groups are not across devices.
  Outcome o = check(Mesh({"fsdp", "expert"}, {2, 2}), 2, {"fsdp"});
  EXPECT_EQ(count(o.text, "mesh_axes=expert"), 0) << o.text;
  EXPECT_GT(count(o.text, "all_gather("), 0) << o.text;
}

}  // namespace
}  // namespace kiln::spmd
