// gradient_accumulation_steps (MaxText's semantics): k micro-batches inside the one compiled
// step give the losses of the same global batch in one micro-batch, on one device and on
// meshes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/train/sharded_tiny_run.h"

namespace kiln::train {
namespace {

constexpr int kSteps = 8;

std::vector<double> losses(int64_t devices, int64_t per_device_batch, int64_t accumulation,
                           const std::vector<std::string>& mesh, const std::string& name) {
  std::vector<std::string> extra = mesh;
  extra.push_back("per_device_batch_size=" + std::to_string(per_device_batch));
  extra.push_back("gradient_accumulation_steps=" + std::to_string(accumulation));
  // Fresh data every step (not one reused batch), so each micro-batch differs.
  extra.push_back("reuse_example_batch=0");
  return testing::sharded_tiny_losses(extra, devices, "accum_" + name, "compiled", kSteps);
}

void expect_equal_losses(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << "step " << i;
  }
}

TEST(GradientAccumulation, FourMicroBatchesEqualOneBatchOnOneDevice) {
  std::vector<double> one = losses(1, 4, 1, {}, "single_b4");
  std::vector<double> four = losses(1, 1, 4, {}, "single_b1x4");
  expect_equal_losses(four, one);
  EXPECT_LT(four.back(), four.front());
}

TEST(GradientAccumulation, TwoMicroBatchesEqualOneBatchOnFsdpTimesExpert) {
  const std::vector<std::string> mesh = {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"};
  std::vector<double> want = losses(1, 8, 1, {}, "single_b8");
  std::vector<double> got = losses(4, 1, 2, mesh, "fsdp2expert2_b1x2");
  expect_equal_losses(got, want);
}

TEST(GradientAccumulation, DataParallelMicroBatches) {
  std::vector<double> want = losses(1, 8, 1, {}, "single_b8_dp");
  std::vector<double> got = losses(4, 1, 2, {"ici_data_parallelism=2", "ici_fsdp_parallelism=2"}, "dp2fsdp2_b1x2");
  expect_equal_losses(got, want);
}

}  // namespace
}  // namespace kiln::train
