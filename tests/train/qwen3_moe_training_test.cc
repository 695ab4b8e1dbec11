// Qwen3-MoE trains: qwen3-moe-tiny, shrunk, learns the fortunes corpus (bytes) over 30 steps
// on one device, and the same run on 4 virtual devices (fsdp 2 × expert 2: the experts split
// over 2 devices, tokens exchanged with ragged all-to-alls, weights all-gathered over fsdp)
// gives the one-device losses step for step. Both runs are compiled by the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 30;

// qwen3-moe-tiny at 2 layers of width 32, QK-norm on 4 heads of 16, top-2 of 8 experts with
// the load-balance loss on; 4 sequences of 32 bytes per step, whatever the device count.
std::vector<double> losses(const std::vector<std::string>& mesh, int64_t devices, const std::string& name) {
  const fs::path out = fs::path(::testing::TempDir()) / ("kiln_qwen3_moe_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(out);
  config::LoadOptions lo;
  lo.overrides = {"model_name=qwen3-moe-tiny", "override_model_config=true", "base_emb_dim=32",
                  "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16", "base_num_decoder_layers=2",
                  "base_moe_mlp_dim=16", "num_experts=8", "num_experts_per_tok=2", "vocab_size=258",
                  "max_target_length=32", "per_device_batch_size=" + std::to_string(4 / devices),
                  "local_devices=" + std::to_string(devices), "steps=" + std::to_string(kSteps),
                  "learning_rate=1e-2", "warmup_steps_fraction=0", "dataset_type=text",
                  "dataset_path=/usr/share/games/fortunes", "tokenizer_type=bytes",
                  "dataset_cache_dir=" + (out / "corpus").string(), "backend=cpu", "enable_checkpointing=false",
                  "log_period=100", "run_name=" + name, "base_output_directory=" + out.string()};
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  std::unique_ptr<Trainer> trainer = testing::make_quiet_trainer(lo, /*write_metrics_file=*/false);
  Status s = trainer->run();
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<double> result = testing::step_losses(*trainer);
  trainer.reset();
  fs::remove_all(out);
  return result;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

TEST(Qwen3MoeTraining, LearnsOnOneDeviceAndFsdpTimesExpertGivesTheSameLosses) {
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "no fortunes corpus (fortunes-min)";
  const std::vector<double> one = losses({}, 1, "one");
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  // Each step is a new batch: compare the first and last five steps' means.
  EXPECT_LT(mean(one, kSteps - 5, kSteps), mean(one, 0, 5) - 1.0) << "the loss should fall well below ln 258 = 5.55";
  const std::vector<double> four = losses({"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, 4, "fsdp2expert2");
  ASSERT_EQ(four.size(), one.size());
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(four[i], one[i], 1e-5 * std::abs(one[i])) << "step " << i;
    worst = std::max(worst, std::abs(four[i] - one[i]) / std::abs(one[i]));
  }
  std::printf("loss %.4f -> %.4f (first and last 5 steps' means); fsdp 2 x expert 2 vs one device: max relative "
              "difference %.2e\n", mean(one, 0, 5), mean(one, kSteps - 5, kSteps), worst);
}

}  // namespace
}  // namespace kiln::train
