// Per-layer expert load in the training metrics: the step program's extra output, the
// trainer's StepRecord every log_period steps, and the console / JSON lines.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/observability/metrics.h"
#include "kiln/train/trainer.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

config::Config moe_config(std::vector<std::string> extra) {
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  std::string out = (::kiln::testing::temp_path("kiln_moe_metrics")).string();
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=32", "base_num_query_heads=4",
                  "base_num_kv_heads=2", "head_dim=16", "base_num_decoder_layers=2", "base_moe_mlp_dim=24",
                  "num_experts=4", "num_experts_per_tok=2", "vocab_size=64", "sliding_window_size=4",
                  "max_target_length=12", "per_device_batch_size=2", "steps=3", "backend=interpreter",
                  "reuse_example_batch=1", "enable_checkpointing=false",
                  "run_name=" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()),
                  "base_output_directory=" + out};
  lo.overrides.insert(lo.overrides.end(), extra.begin(), extra.end());
  auto cfg = config::load(lo);
  KILN_CHECK(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

std::vector<StepRecord> train(const config::Config& cfg) {
  auto model = models::make_model(cfg);
  KILN_CHECK_OK(model);
  TrainerOptions options;
  options.console = nullptr;
  auto t = Trainer::create(cfg, std::move(*model), options);
  KILN_CHECK(t.ok()) << t.status().to_string();
  KILN_CHECK_OK((*t)->run());
  return (*t)->history();
}

TEST(MoeMetrics, ExpertLoadEveryLogPeriod) {
  std::vector<StepRecord> h = train(moe_config({"log_period=2"}));
  ASSERT_EQ(h.size(), 3u);
  ASSERT_EQ(h[0].expert_load.size(), 6u);  // 2 layers x {max, mean, dropped}
  EXPECT_TRUE(h[1].expert_load.empty());   // step 1 is not a multiple of log_period
  EXPECT_EQ(h[2].expert_load.size(), 6u);
  for (int l = 0; l < 2; ++l) {
    EXPECT_DOUBLE_EQ(h[0].expert_load[3 * l + 1], 2.0 * 12 * 2 / 4);  // mean: B * T * k / E
    EXPECT_GE(h[0].expert_load[3 * l], h[0].expert_load[3 * l + 1]);  // max >= mean
    EXPECT_EQ(h[0].expert_load[3 * l + 2], 0.0);                      // dropless
  }
  EXPECT_NE(console_line(h[0]).find("expert_load (max/mean/dropped): ["), std::string::npos) << console_line(h[0]);
  EXPECT_EQ(console_line(h[1]).find("expert_load"), std::string::npos);
  EXPECT_NE(json_line(h[0]).find("\"expert_load\": [["), std::string::npos) << json_line(h[0]);
}

TEST(MoeMetrics, DroppedPairsWithACapacity) {
  // capacity_factor 0.5: 3 pairs per expert per sequence of 24 pairs: at least 12 dropped.
  std::vector<StepRecord> h = train(moe_config({"log_period=1", "capacity_factor=0.5"}));
  ASSERT_EQ(h.size(), 3u);
  ASSERT_EQ(h[0].expert_load.size(), 6u);
  EXPECT_GE(h[0].expert_load[2], 12.0);
  EXPECT_GE(h[0].expert_load[5], 12.0);
}

TEST(MoeMetrics, LineFormats) {
  StepRecord r;
  r.expert_load = {24, 12, 0, 15, 12, 3};
  EXPECT_NE(console_line(r).find(", expert_load (max/mean/dropped): [24/12/0, 15/12/3]"), std::string::npos)
      << console_line(r);
  std::string json = json_line(r);
  EXPECT_NE(json.find(", \"expert_load\": [[24, 12, 0], [15, 12, 3]]}"), std::string::npos) << json;
}

}  // namespace
}  // namespace kiln::train
