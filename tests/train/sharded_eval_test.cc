// The eval program runs partitioned like the step: on every mesh of the equivalence tests
// each device evaluates with its own shards of the parameters (never a global copy) and its
// rows of the batch, and the eval loss is the one-device run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/train/sharded_tiny_run.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

struct EvalRun {
  double loss = 0;
  bool some_parameter_is_a_shard = false;  // in the program each device runs
};

// Two steps of the shrunk gpt-oss-tiny on fortunes (bytes), then the eval loss on 2 batches.
EvalRun eval_after_two_steps(const std::vector<std::string>& mesh, int64_t devices, const std::string& name,
                             const std::string& backend) {
  const fs::path out = fs::path(::testing::TempDir()) / ("kiln_sharded_eval_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(out);
  config::LoadOptions lo;
  for (const std::string& s : testing::sharded_tiny_overrides(devices)) {
    if (s.rfind("vocab_size=", 0) != 0) lo.overrides.push_back(s);
  }
  for (const std::string& s :
       {std::string("vocab_size=258"), std::string("steps=2"), std::string("learning_rate=1e-2"),
        std::string("dataset_type=text"), std::string("dataset_path=/usr/share/games/fortunes"),
        std::string("tokenizer_type=bytes"), "dataset_cache_dir=" + (out / "corpus").string(),
        std::string("eval_interval=2"), std::string("eval_steps=2"), "backend=" + backend,
        std::string("enable_checkpointing=false"), "run_name=" + name, "base_output_directory=" + out.string()}) {
    lo.overrides.push_back(s);
  }
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  std::unique_ptr<Trainer> t = testing::make_quiet_trainer(lo, /*write_metrics_file=*/false);
  EXPECT_TRUE(t->run().ok());
  Result<double> loss = t->evaluate();
  EXPECT_TRUE(loss.ok()) << loss.status().to_string();
  EvalRun r;
  r.loss = loss.ok() ? *loss : NAN;
  const ir::Computation& local = *t->eval_runner()->local_module().entry();
  const ir::Computation& step = *t->program().module->entry();
  for (int64_t i = 0; i < t->program().num_params; ++i) {
    // The step program here is the global one: a smaller eval parameter is a shard.
    const ir::Shape& global = step.param(static_cast<int>(t->program().param_arg(i)))->shape();
    if (local.param(static_cast<int>(i))->shape().num_elements() < global.num_elements()) {
      r.some_parameter_is_a_shard = true;
    }
  }
  t.reset();
  fs::remove_all(out);
  return r;
}

const EvalRun& one_device(const std::string& backend) {
  static const EvalRun compiled = eval_after_two_steps({}, 1, "one_compiled", "cpu");
  static const EvalRun interpreted = eval_after_two_steps({}, 1, "one_interpreted", "interpreter");
  return backend == "cpu" ? compiled : interpreted;
}

class ShardedEval : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ShardedEval, EachDeviceReadsItsShardsAndTheLossIsTheOneDeviceLoss) {
  const std::vector<std::string>& mesh = GetParam();
  const std::string name = testing::mesh_name(mesh);
  const EvalRun sharded = eval_after_two_steps(mesh, 4, name, "cpu");
  const EvalRun& reference = one_device("cpu");
  EXPECT_GT(reference.loss, 1.0);  // near ln 258 after two steps from the initial parameters
  EXPECT_LT(reference.loss, 8.0);
  EXPECT_FALSE(reference.some_parameter_is_a_shard);
  EXPECT_TRUE(sharded.some_parameter_is_a_shard);
  // The same sums in another order (reductions over devices), as the training losses.
  EXPECT_NEAR(sharded.loss, reference.loss, 1e-5 * reference.loss);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, ShardedEval,
    ::testing::ValuesIn(testing::equivalence_meshes()));

TEST(ShardedEval, OnTheInterpreterTooEachDeviceReadsItsShards) {
  const EvalRun sharded = eval_after_two_steps({"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, 4,
                                               "fsdp2expert2_interpreted", "interpreter");
  EXPECT_TRUE(sharded.some_parameter_is_a_shard);
  EXPECT_NEAR(sharded.loss, one_device("interpreter").loss, 1e-5 * one_device("interpreter").loss);
}

// backend=pjrt: the eval program reads the parameters where the step keeps them (XLA device
// buffers), on one device and as one XLA program over a mesh, with the CPU backend's loss
// (XLA's own summation order: 1e-5 relative).
TEST(ShardedEval, OnPjrtTheLossIsTheCpuBackendsOnOneDeviceAndOnAMesh) {
  const EvalRun one = eval_after_two_steps({}, 1, "one_pjrt", "pjrt");
  EXPECT_NEAR(one.loss, one_device("cpu").loss, 1e-5 * one_device("cpu").loss);
  const EvalRun sharded = eval_after_two_steps({"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, 4,
                                               "fsdp2expert2_pjrt", "pjrt");
  EXPECT_TRUE(sharded.some_parameter_is_a_shard);
  EXPECT_NEAR(sharded.loss, one_device("cpu").loss, 1e-5 * one_device("cpu").loss);
}

}  // namespace
}  // namespace kiln::train
