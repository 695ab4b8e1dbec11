// Parallelism is a config value: the same GPT-OSS step partitioned over 4 virtual devices
// with each mesh of the issue gives the single-device run's losses for 20 steps. The
// per-device programs run on the reference interpreter (the oracle), so what is tested is
// the partitioner and the collectives, not a kernel's rounding (one compiled case checks
// the native collective kernels); the model is gpt-oss-tiny's
// layout shrunk so that every mesh axis divides its dimensions and the test stays short.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"

namespace kiln::train {
namespace {

constexpr int kSteps = 20;  // as the issue asks: 20 steps

std::vector<double> run_losses(const std::vector<std::string>& mesh, int64_t devices, const std::string& name,
                               const std::string& backend = "interpreter", int steps = kSteps) {
  return testing::sharded_tiny_losses(mesh, devices, "sharded_" + name, backend, steps);
}

const std::vector<double>& single_device_losses() {
  static const std::vector<double> losses = run_losses({}, 1, "single");
  return losses;
}

class ShardedTraining : public ::testing::TestWithParam<std::vector<std::string>> {};

// The loss goes through thousands of float32 roundings in a different order (partial sums
// per shard): agreement to 1e-4 relative over a few steps is what float32 allows; a wrong
// collective moves the loss by far more (and usually the first step already).
TEST_P(ShardedTraining, MatchesTheSingleDeviceRun) {
  const std::vector<double>& expected = single_device_losses();
  const std::string name = testing::mesh_name(GetParam());  // "fsdp2expert2"
  std::vector<double> got = run_losses(GetParam(), 4, name);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 1e-4 * std::abs(expected[i])) << "step " << i;
  }
  EXPECT_LT(got.back(), got.front());  // and it learns
}

// The compiled per-device program: native collective kernels on buffers (f32 sums in rank
// order) against the one-device compiled run.
TEST(ShardedTrainingCompiled, TensorAndFsdpMatchTheSingleDeviceRun) {
  std::vector<double> expected = run_losses({}, 1, "single_compiled", "cpu", 3);
  std::vector<double> got =
      run_losses({"ici_tensor_parallelism=2", "ici_fsdp_parallelism=2"}, 4, "tensor2fsdp2_compiled", "cpu", 3);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-4 * std::abs(expected[i])) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, ShardedTraining,
    ::testing::ValuesIn(testing::equivalence_meshes()));

}  // namespace
}  // namespace kiln::train
