#include "tests/spmd/partition_check.h"

#include <random>

#include <gtest/gtest.h>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/device_context.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/spmd/partitioner.h"
#include "tests/testing/random_literals.h"

namespace kiln::spmd {

// Partitions, runs the per-device program on every device of the mesh and compares the
// assembled outputs with the global program's. Returns the per-device program's text.
std::string check_partition_equivalent(const PartitionCase& c, double tolerance) {
  auto parsed = ir::parse_module(c.ir);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  if (!parsed.ok()) return "";
  const ir::Module& global = **parsed;
  PartitionOptions options;
  options.mesh = c.mesh;
  options.seeds.params = c.params;
  options.seeds.outputs = c.outputs;
  auto result = partition(global, options);
  EXPECT_TRUE(result.ok()) << result.status().to_string();
  if (!result.ok()) return "";
  // What every backend runs first (the duplicate gathers resharding inserts merged, dead
  // slices gone): the collectives left are the ones that would run.
  Result<bool> cleaned = passes::default_pipeline().run(*result->module);
  EXPECT_TRUE(cleaned.ok()) << cleaned.status().to_string();
  std::string text = ir::print_module(*result->module);

  std::mt19937_64 rng(7);
  std::vector<ir::Literal> args;
  for (const ir::Instr* p : global.entry()->params()) args.push_back(testing::random_literal(p->shape(), rng, -1, 1));
  auto expected = interp::run(global, args);
  EXPECT_TRUE(expected.ok());

  const int64_t n = c.mesh.num_devices();
  runtime::LocalWorld world(n);
  std::vector<std::vector<ir::Literal>> outputs(n);
  Status s = runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{c.mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::vector<ir::Literal> local_args;
    for (size_t i = 0; i < args.size(); ++i) {
      local_args.push_back(shard_literal(args[i], result->param_shardings[i], c.mesh, d));
    }
    KILN_ASSIGN_OR_RETURN(outputs[d], interp::run(*result->module, local_args));
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string() << "\n" << text;
  if (!s.ok()) return text;
  for (size_t i = 0; i < expected->size(); ++i) {
    std::vector<const ir::Literal*> shards;
    for (int64_t d = 0; d < n; ++d) shards.push_back(&outputs[d][i]);
    ir::Literal got = assemble_literal(shards, (*expected)[i].shape(), result->output_shardings[i], c.mesh);
    for (size_t k = 0; k < got.values().size(); ++k) {
      EXPECT_NEAR(got.values()[k], (*expected)[i].values()[k], tolerance) << "output " << i << " element " << k << "\n"
                                                                         << text;
    }
  }
  return text;
}

int count_in(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace kiln::spmd
