// collective_wait: the step line and metrics.jsonl carry the time a step was blocked on
// collectives when the mesh has several devices, and leave it out on one device (whose
// lines stay MaxText's). The multi-process run is tested by mpi_training_run.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/train/observability/metrics.h"
#include "kiln/train/observability/observability.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

TEST(CollectiveWait, ConsoleAndJsonCarryItOnlyWithCollectives) {
  StepRecord r;
  r.loss = 4.5;
  EXPECT_EQ(console_line(r).find("collective_wait"), std::string::npos);
  EXPECT_EQ(json_line(r).find("collective_wait"), std::string::npos);
  r.collective_wait_s = 0.0125;
  r.expert_load = {3, 2, 0};
  const std::string line = console_line(r);
  EXPECT_NE(line.find("data_wait: 0.000, collective_wait: 0.013, expert_load"), std::string::npos) << line;
  const std::string json = json_line(r);
  EXPECT_NE(json.find("\"collective_wait_s\": 0.0125, \"expert_load\""), std::string::npos) << json;
}

// TensorBoard carries every number of the console line: collective_wait only where the
// line has it.
TEST(CollectiveWait, TensorBoardCarriesItOnlyWithCollectives) {
  StepRecord r;
  auto has_wait = [](const std::vector<Scalar>& s) {
    return std::count_if(s.begin(), s.end(), [](const Scalar& x) { return x.tag == "perf/collective_wait_seconds"; });
  };
  EXPECT_EQ(has_wait(tensorboard_scalars(r)), 0);
  r.collective_wait_s = 0.0125;
  const std::vector<Scalar> s = tensorboard_scalars(r);
  ASSERT_EQ(has_wait(s), 1);
  for (const Scalar& x : s) {
    if (x.tag == "perf/collective_wait_seconds") {
      EXPECT_FLOAT_EQ(x.value, 0.0125f);
    }
  }
}

// Two virtual devices (fsdp=2): every step reports a wait between 0 and its step time, in
// the history and in the TensorBoard event file.
TEST(CollectiveWait, ShardedStepsReportIt) {
  std::filesystem::path out = ::kiln::testing::temp_path("kiln_collective_wait");
  std::filesystem::remove_all(out);
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
                  "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
                  "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "sliding_window_size=8",
                  "max_target_length=8", "per_device_batch_size=1", "local_devices=2", "ici_fsdp_parallelism=2",
                  "steps=2", "backend=interpreter", "enable_checkpointing=false", "enable_tensorboard=true",
                  "run_name=wait", "base_output_directory=" + out.string()};
  std::unique_ptr<Trainer> trainer = testing::make_quiet_trainer(lo, /*write_metrics_file=*/false);
  ASSERT_TRUE(trainer->run().ok());
  ASSERT_EQ(trainer->history().size(), 2u);
  for (const StepRecord& r : trainer->history()) {
    EXPECT_GE(r.collective_wait_s, 0.0);
    EXPECT_LE(r.collective_wait_s, r.step_time_s);
  }
  // The tag is in the event file (the record format itself is checked by observability_run).
  std::string events;
  for (const auto& f : std::filesystem::directory_iterator(out / "wait" / "tensorboard")) {
    std::ifstream in(f.path(), std::ios::binary);
    events.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  size_t tags = 0;
  for (size_t at = events.find("perf/collective_wait_seconds"); at != std::string::npos;
       at = events.find("perf/collective_wait_seconds", at + 1)) {
    ++tags;
  }
  EXPECT_EQ(tags, 2u) << "one collective_wait scalar per step";
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kiln::train
