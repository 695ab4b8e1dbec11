// backend=interpreter traces: the interpreter's instruction hook gives one span per
// evaluated instruction on the device track, like the compiled executable's observer, so a
// profiled interpreter run has GEMM and op events and an attribution table with a gemm row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/config/config.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

TEST(InterpreterTrace, EveryEvaluatedInstructionIsASpanOnTheDeviceTrack) {
  std::filesystem::path out = ::kiln::testing::temp_path("kiln_interpreter_trace");
  std::filesystem::remove_all(out);
  config::LoadOptions lo;
  lo.overrides = {"model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
                  "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
                  "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "sliding_window_size=8",
                  "max_target_length=8", "per_device_batch_size=1", "steps=2", "backend=interpreter",
                  "profiler=trace", "skip_first_n_steps_for_profiler=1", "profiler_steps=1",
                  "enable_checkpointing=false", "enable_tensorboard=false", "run_name=interp",
                  "base_output_directory=" + out.string()};
  std::unique_ptr<Trainer> trainer = testing::make_quiet_trainer(lo, /*write_metrics_file=*/false);
  ASSERT_TRUE(trainer->run().ok());

  std::ifstream in(out / "interp" / "profile" / "trace.json");
  ASSERT_TRUE(in) << "no trace written";
  const nlohmann::json trace = nlohmann::json::parse(in);
  int device_spans = 0, gemms = 0, steps = 0;
  double step_us = 0, device_us = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "step") ++steps, step_us += e["dur"].get<double>();
    if (e["pid"] != 1) continue;  // device 0
    ++device_spans;
    device_us += e["dur"].get<double>();
    if (e["cat"] == "gemm") {
      ++gemms;
      EXPECT_NE(e["name"].get<std::string>().find(" gemm "), std::string::npos) << e.dump();
    }
  }
  EXPECT_EQ(steps, 1);
  EXPECT_GT(device_spans, 100) << "one span per instruction of the whole step";
  EXPECT_GT(gemms, 0);
  // The interpreter's ops are most of its step (one step, sequential spans on one thread).
  EXPECT_GT(device_us, 0.5 * step_us);
  EXPECT_LE(device_us, step_us * 1.001);
  std::ifstream table(out / "interp" / "profile" / "attribution.txt");
  std::string text((std::istreambuf_iterator<char>(table)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\n  gemm "), std::string::npos) << text;
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kiln::train
