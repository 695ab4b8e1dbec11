// The partitioner's rule for ragged_all_to_all (spmd/ragged_exchange.h): entries split one
// per device become the per-device exchange over the axes that number each group's
// members, with no gather of the rows; the per-device results equal the global program's.
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/ops/device_context.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/spmd/partitioner.h"
#include "tests/testing/random_literals.h"

namespace kiln::spmd {
namespace {

#define ASSERT_NEAR_OR_RETURN(a, b, tol, outcome, what)                                   \
  do {                                                                                    \
    if (!(std::fabs((a) - (b)) <= (tol))) {                                               \
      ADD_FAILURE() << what << ": " << (a) << " vs " << (b) << "\n" << (outcome).text;    \
      return outcome;                                                                     \
    }                                                                                     \
  } while (0)

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

// Partitions `text` on `mesh` with the given parameter and output layouts, runs it on
// virtual devices (seeded random floats; s32 parameters are group sizes in [-1, 4]) and
// requires every output to equal the global program's within `tolerance`.
Outcome check_program(const std::string& text, const config::Mesh& mesh, std::vector<std::optional<ir::Sharding>> params,
                      std::vector<std::optional<ir::Sharding>> outputs, double tolerance) {
  auto global = ir::parse_module(text);
  KILN_CHECK_OK(global);
  PartitionOptions options;
  options.mesh = mesh;
  options.seeds.params = std::move(params);
  options.seeds.outputs = std::move(outputs);
  auto result = partition(**global, options);
  KILN_CHECK_OK(result);
  KILN_CHECK_OK(passes::default_pipeline().run(*result->module));  // what every backend runs first
  Outcome o{ir::print_module(*result->module)};

  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> size(-1, 4);
  std::vector<ir::Literal> args;
  for (const ir::Instr* p : (*global)->entry()->params()) {
    if (p->shape().dtype() == ir::DType::kS32) {
      std::vector<double> sizes(p->shape().num_elements());
      for (double& s : sizes) s = size(rng);
      args.emplace_back(p->shape(), sizes);
    } else {
      args.push_back(testing::random_literal(p->shape(), rng, -1, 1));
    }
  }
  auto want = interp::run(**global, args);
  KILN_CHECK_OK(want);

  const int64_t n = mesh.num_devices();
  runtime::LocalWorld world(n);
  std::vector<std::vector<ir::Literal>> got_local(n);
  KILN_CHECK_OK(runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::vector<ir::Literal> local;
    for (size_t i = 0; i < args.size(); ++i) local.push_back(shard_literal(args[i], result->param_shardings[i], mesh, d));
    KILN_ASSIGN_OR_RETURN(got_local[d], interp::run(*result->module, local));
    return ok_status();
  }));
  for (size_t i = 0; i < want->size(); ++i) {
    std::vector<const ir::Literal*> shards;
    for (int64_t d = 0; d < n; ++d) shards.push_back(&got_local[d][i]);
    ir::Literal got = assemble_literal(shards, (*want)[i].shape(), result->output_shardings[i], mesh);
    for (size_t k = 0; k < got.values().size(); ++k) {
      ASSERT_NEAR_OR_RETURN(got.values()[k], (*want)[i].values()[k], tolerance, o, "output " << i << " [" << k << "]");
    }
  }
  return o;
}

Outcome check(const config::Mesh& mesh, int64_t g, const Axes& batch) {
  // Rows move unchanged and tanh sees the same floats: equal bits.
  return check_program(program(g), mesh, {ir::Sharding{{batch, {}, {}}}, ir::Sharding{{batch, {}}}}, {}, 0);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(RaggedExchange, EntriesSplitOverExpertExchangeWithoutGathering) {
  Outcome o = check(config::Mesh({"expert"}, {4}), 4, {"expert"});
  EXPECT_EQ(count(o.text, "ragged_all_to_all("), 2) << o.text;
  EXPECT_EQ(count(o.text, "mesh_axes=expert"), 2) << o.text;
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
  const auto stats = ops::count_collectives(*ir::parse_module(o.text).value());
  ASSERT_TRUE(stats.count("ragged_all_to_all"));
  EXPECT_EQ(stats.at("ragged_all_to_all").count, 2);
}

TEST(RaggedExchange, BatchOverFsdpAndExpertExchangesOverExpertOnly) {
  // Entry p = 2 * fsdp + expert: groups of 2 are the devices that share an fsdp coordinate.
  Outcome o = check(config::Mesh({"fsdp", "expert"}, {2, 2}), 2, {"fsdp", "expert"});
  EXPECT_EQ(count(o.text, "mesh_axes=expert"), 2) << o.text;
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
}

TEST(RaggedExchange, GroupsOfTheWholeBatchExchangeOverEveryBatchAxis) {
  Outcome o = check(config::Mesh({"fsdp", "expert"}, {2, 2}), 4, {"fsdp", "expert"});
  EXPECT_EQ(count(o.text, "mesh_axes=\"fsdp,expert\""), 2) << o.text;
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
}

TEST(RaggedExchange, LayoutsWithoutOneEntryPerDeviceRunReplicated) {
  // Entries split over fsdp only: two per device, so the groups are not across devices.
  Outcome o = check(config::Mesh({"fsdp", "expert"}, {2, 2}), 2, {"fsdp"});
  EXPECT_EQ(count(o.text, "mesh_axes=expert"), 0) << o.text;
  EXPECT_GT(count(o.text, "all_gather("), 0) << o.text;
}

// Grouped matmuls of expert parallelism: entries split one per device, the experts' weights
// split over expert (and their model dimension over fsdp); forward product and weight
// gradient. E = 2 experts per device's block.
std::string experts_program(int64_t experts) {
  return fmt::format(R"(module @experts

ENTRY computation @main {{
  %x = f32[4,6,4] parameter(), index=0
  %sizes = s32[4,2] parameter(), index=1
  %w = f32[{0},4,3] parameter(), index=2
  %y = f32[4,6,3] grouped_matmul(%x, %w, %sizes)
  %dy = f32[4,6,3] tanh(%y)
  %dw = f32[{0},4,3] grouped_matmul_weight_grad(%x, %dy, %sizes), num_groups={0}
  ROOT %r = (f32[4,6,3], f32[{0},4,3]) tuple(%y, %dw)
}}
)",
                     experts);
}

TEST(ExpertBlocks, EachDeviceMultipliesItsEntryByItsOwnExperts) {
  // expert=4: 8 experts, 2 per device; no weight is gathered, the gradient stays local.
  const ir::Sharding w{{{"expert"}, {}, {}}};
  Outcome o = check_program(experts_program(8), config::Mesh({"expert"}, {4}),
                            {ir::Sharding{{{"expert"}, {}, {}}}, ir::Sharding{{{"expert"}, {}}}, w}, {std::nullopt, w},
                            1e-5);
  EXPECT_EQ(count(o.text, "all_gather("), 0) << o.text;
  EXPECT_EQ(count(o.text, "all_reduce("), 0) << o.text;
  EXPECT_EQ(count(o.text, "reduce_scatter("), 0) << o.text;
}

TEST(ExpertBlocks, FsdpTimesExpertGathersOnlyOverFsdpAndReduceScattersTheGradient) {
  // fsdp 2 × expert 2: 4 experts, 2 per expert shard, the model dimension over fsdp (MaxText's
  // embed_moe); entries of both fsdp rows share a block, so their gradients are summed over
  // fsdp, straight onto the fsdp shard.
  const ir::Sharding w{{{"expert"}, {"fsdp"}, {}}};
  Outcome o = check_program(experts_program(4), config::Mesh({"fsdp", "expert"}, {2, 2}),
                            {ir::Sharding{{{"fsdp", "expert"}, {}, {}}}, ir::Sharding{{{"fsdp", "expert"}, {}}}, w},
                            {std::nullopt, w}, 1e-5);
  EXPECT_EQ(count(o.text, "all_gather("), 1) << o.text;  // the weight's fsdp shards, never its experts
  EXPECT_EQ(count(o.text, "mesh_axes=fsdp"), 2) << o.text;
  EXPECT_EQ(count(o.text, "reduce_scatter("), 1) << o.text;
  if (std::getenv("KILN_TEST_PRINT_IR")) std::printf("%s\n", o.text.c_str());
}

}  // namespace
}  // namespace kiln::spmd
