// The initial state is born sharded: the init program partitioned like the step makes each
// device's own shard of every parameter, bit-identical on every mesh to the one-device
// values and to the reference interpreter's global init program, without a collective.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/printer.h"
#include "kiln/models/model.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/ops/device_context.h"
#include "kiln/spmd/partitioner.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

// The parameters right after Trainer::create (assembled from the shards for the test).
std::vector<ir::Literal> initial_params(const std::vector<std::string>& mesh, int64_t devices, const std::string& name,
                                        const std::vector<std::string>& extra = {},
                                        const std::string& backend = "cpu") {
  std::filesystem::path out = ::kiln::testing::temp_path("kiln_init_" + name);
  config::LoadOptions lo;
  lo.overrides = testing::sharded_tiny_overrides(devices);
  for (const std::string& s : {std::string("steps=0"), "backend=" + backend,
                               std::string("enable_checkpointing=false"), "run_name=" + name,
                               "base_output_directory=" + out.string()}) {
    lo.overrides.push_back(s);
  }
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  std::unique_ptr<Trainer> trainer = testing::make_quiet_trainer(lo, /*write_metrics_file=*/false);
  std::vector<ir::Literal> params = trainer->params();
  trainer.reset();
  std::filesystem::remove_all(out);
  return params;
}

void expect_bit_identical(const std::vector<ir::Literal>& got, const std::vector<ir::Literal>& want,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape()) << what << " parameter " << i;
    const auto& g = got[i].values();
    const auto& w = want[i].values();
    ASSERT_EQ(0, std::memcmp(g.data(), w.data(), g.size() * sizeof(double))) << what << " parameter " << i;
  }
}

const std::vector<ir::Literal>& one_device() {
  static const std::vector<ir::Literal> params = initial_params({}, 1, "single");
  return params;
}

TEST(StateInit, OneDeviceEqualsTheInterpretedGlobalInitProgram) {
  // The reference: the whole init program on the reference interpreter, as before sharding.
  config::LoadOptions lo;
  lo.overrides = testing::sharded_tiny_overrides(1);
  auto cfg = config::load(lo);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  ASSERT_TRUE(model.ok());
  std::unique_ptr<ir::Module> init = build_init_program((*model)->params(), cfg->get_int("init_weights_seed"));
  auto reference = interp::run(*init, {});
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  expect_bit_identical(one_device(), *reference, "one device vs interpreter");
  // Not all zeros: the generator really ran.
  double sum = 0;
  for (const auto& p : one_device()) {
    for (double v : p.values()) sum += v * v;
  }
  EXPECT_GT(sum, 1.0);
}

// backend=interpreter makes the same shards on the reference interpreter.
TEST(StateInit, InterpreterExecutorMakesTheSameValues) {
  expect_bit_identical(initial_params({}, 1, "single_interp", {}, "interpreter"), one_device(), "interpreter");
  expect_bit_identical(initial_params({"ici_fsdp_parallelism=4"}, 4, "fsdp4_interp", {}, "interpreter"), one_device(),
                       "interpreter fsdp4");
}

class StateInitMeshes : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(StateInitMeshes, EveryShardIsTheOneDeviceBlock) {
  const std::string name = testing::mesh_name(GetParam());
  expect_bit_identical(initial_params(GetParam(), 4, name), one_device(), name);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, StateInitMeshes,
    ::testing::ValuesIn(testing::equivalence_meshes()));

// bf16 parameters: the kernel rounds as the interpreter does.
TEST(StateInit, Bf16ParametersMatchOnFsdp) {
  expect_bit_identical(initial_params({"ici_fsdp_parallelism=4"}, 4, "bf16_fsdp4", {"weight_dtype=bfloat16"}),
                       initial_params({}, 1, "bf16_single", {"weight_dtype=bfloat16"}), "bf16");
}

// The partitioner lowers a split rng to the device's block: no whole value, no collective.
TEST(StateInit, SplitRngIsLoweredToTheDeviceBlock) {
  ir::Module module("m");
  ir::Computation* comp = module.add_computation("main");
  module.set_entry(comp);
  ops::Builder b(comp);
  ir::Instr* r = b.rng(ir::Shape(ir::DType::kF32, {8, 6}), "normal", 7);
  comp->set_root(b.tuple({r}));
  spmd::PartitionOptions options;
  options.mesh = config::Mesh({"fsdp", "tensor"}, {2, 3});
  options.seeds.outputs = {ir::Sharding{{{"fsdp"}, {"tensor"}}}};
  auto partition = spmd::partition(module, options);
  ASSERT_TRUE(partition.ok()) << partition.status().to_string();
  const std::string text = ir::print_module(*partition->module);
  EXPECT_NE(text.find("f32[4,2] rng()"), std::string::npos) << text;
  EXPECT_NE(text.find("split=\"fsdp;tensor\""), std::string::npos) << text;
  EXPECT_TRUE(ops::count_collectives(*partition->module).empty()) << text;
  // Each device's block is the block of the global rng.
  auto global = interp::run(module, {});
  ASSERT_TRUE(global.ok());
  for (int64_t device = 0; device < 6; ++device) {
    ops::DeviceContext context{options.mesh, device, nullptr};
    ops::ScopedDeviceContext scope(&context);
    auto local = interp::run(*partition->module, {});
    ASSERT_TRUE(local.ok()) << local.status().to_string();
    ir::Literal want = spmd::shard_literal((*global)[0], options.seeds.outputs[0].value(), options.mesh, device);
    EXPECT_EQ((*local)[0].values(), want.values()) << "device " << device;
  }
}

}  // namespace
}  // namespace kiln::train
