// DeepSeek-V3 trains: deepseek3-tiny, shrunk, learns the fortunes corpus (bytes) over 30 steps
// on one device with every feature on (MLA, a dense layer then MoE with a shared expert,
// sigmoid group routing, the bias update at rate 1e-3, one MTP module), and the same run on 4
// virtual devices (fsdp 2 × expert 2: experts split over 2 devices, tokens exchanged with
// ragged all-to-alls, weights all-gathered over fsdp) gives the one-device losses step for
// step. Both runs are compiled by the CPU backend.
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

// deepseek3-tiny at 3 layers of width 32 (1 dense, 2 MoE), MLA on 2 heads, top-2 of 8
// experts from 2 of 4 groups; 4 sequences of 32 bytes per step, whatever the device count.
std::vector<double> losses(const std::vector<std::string>& mesh, int64_t devices, const std::string& name) {
  const fs::path out = fs::path(::testing::TempDir()) / ("kiln_deepseek_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(out);
  config::LoadOptions lo;
  lo.overrides = {"model_name=deepseek3-tiny", "override_model_config=true", "base_emb_dim=32",
                  "base_num_query_heads=2", "base_num_kv_heads=2", "q_lora_rank=16", "kv_lora_rank=8",
                  "qk_nope_head_dim=8", "qk_rope_head_dim=4", "v_head_dim=8", "base_mlp_dim=48",
                  "base_moe_mlp_dim=16", "vocab_size=258", "routed_bias_update_rate=1e-3",
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

TEST(DeepseekTraining, LearnsOnOneDeviceAndFsdpTimesExpertGivesTheSameLosses) {
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "no fortunes corpus (fortunes-min)";
  const std::vector<double> one = losses({}, 1, "one");
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  // Each step is a new batch: compare the first and last five steps' means (the loss includes
  // 0.1 x the MTP loss).
  EXPECT_LT(mean(one, kSteps - 5, kSteps), mean(one, 0, 5) - 1.0) << "the loss should fall well below 1.1 ln 258";
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
