// A Llama trains, and parallelism is a config value for it too: llama3-tiny, shrunk, learns
// the fortunes corpus (UTF-8 bytes) for 30 steps on one device with a falling loss, and the
// same run on 4 virtual devices (fsdp 2 x tensor 2: the embedding, the attention heads and
// the MLP width split by the logical axis rules) gives the one-device losses step for step.
// The per-device programs run on the reference interpreter, so what is tested is the
// model's sharding and the collectives, not a kernel's rounding.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 30;
const char* kCorpus = "/usr/share/games/fortunes";

// llama3-tiny (Llama 3.1 RoPE scaling on, over an original 16-token context here) at 2
// layers of width 64, 4 query heads on 2 kv heads, a global batch of 4 rows of 32 bytes.
std::vector<double> train(int64_t devices, const std::vector<std::string>& mesh, const std::string& name) {
  const fs::path out =
      fs::path(::testing::TempDir()) / ("kiln_llama_training_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(out);
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  lo.overrides = {"model_name=llama3-tiny", "override_model_config=true", "base_emb_dim=64", "base_num_query_heads=4",
                  "base_num_kv_heads=2", "head_dim=16", "base_mlp_dim=128", "base_num_decoder_layers=2",
                  "original_max_position_embeddings=16", "max_position_embeddings=128", "max_target_length=32",
                  "per_device_batch_size=" + std::to_string(4 / devices), "local_devices=" + std::to_string(devices),
                  "dataset_type=text", std::string("dataset_path=") + kCorpus, "tokenizer_type=bytes",
                  "vocab_size=258", "dataset_cache_dir=" + (out / "cache").string(), "steps=" + std::to_string(kSteps),
                  "learning_rate=3e-3", "warmup_steps_fraction=0.1", "backend=interpreter",
                  "enable_checkpointing=false", "log_period=100", "run_name=" + name,
                  "base_output_directory=" + out.string()};
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  std::unique_ptr<Trainer> trainer = testing::make_quiet_trainer(lo, /*write_metrics_file=*/false);
  Status s = trainer->run();
  KILN_CHECK(s.ok()) << s.to_string();
  std::vector<double> losses = testing::step_losses(*trainer);
  trainer.reset();
  fs::remove_all(out);
  return losses;
}

TEST(LlamaTraining, LearnsOnOneDeviceAndFsdpTimesTensorGivesTheSameLosses) {
  if (!fs::exists(kCorpus)) {
    if (std::getenv("CI")) FAIL() << kCorpus << " is missing (Debian's fortunes-min)";
    GTEST_SKIP() << kCorpus << " is missing (Debian's fortunes-min)";
  }
  const std::vector<double> one = train(1, {}, "one");
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  // Falling: the last five steps' mean well under the first five's (bytes start near
  // ln 258 = 5.55).
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += one[i] / 5, last += one[kSteps - 5 + i] / 5;
  EXPECT_LT(last, first - 1.0) << "first " << first << ", last " << last;

  const std::vector<double> four = train(4, {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}, "fsdp2tensor2");
  ASSERT_EQ(four.size(), one.size());
  // Partial sums in another order (per shard, then all-reduced) round differently in
  // float32: a few 1e-7 relative per step, not growing much over 30 steps; a wrong
  // collective or sharding moves the loss by far more (usually from the first step).
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    worst = std::max(worst, std::abs(four[i] - one[i]) / std::abs(one[i]));
    EXPECT_NEAR(four[i], one[i], 1e-5 * std::abs(one[i])) << "step " << i;
  }
  std::printf("llama3-tiny (shrunk), 30 steps: loss %.4f -> %.4f (first/last 5 mean %.4f -> %.4f); "
              "fsdp 2 x tensor 2 vs one device: worst relative difference %.2e\n",
              one.front(), one.back(), first, last, worst);
}

}  // namespace
}  // namespace kiln::train
