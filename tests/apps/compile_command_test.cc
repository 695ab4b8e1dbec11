// `kiln compile --json` on gpt-oss-tiny: the report has the documented keys with values
// consistent with the model and with each other.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/cli.h"

namespace {

std::string run(const std::string& args, int* exit_code) {
  kiln::testing::CliRun r = kiln::testing::run_command(KILN_BINARY, args);
  *exit_code = r.exit_code;
  return r.out;
}

TEST(CompileCommand, JsonReportForTinyModel) {
  int code = -1;
  std::string out = run("compile --json model_name=gpt-oss-tiny", &code);
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  for (const char* key : {"parameters_total", "parameters_active_per_token", "tflops_per_step_per_device",
                          "instructions_before", "instructions_after", "fused_kernels", "gemms", "attention_kernels",
                          "grouped_matmuls", "collectives", "memory_per_device_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["parameters_total"].get<int64_t>(), 9081664);  // configs/models/gpt-oss-tiny.yml
  EXPECT_GT(j["fused_kernels"].get<int64_t>(), 0);
  EXPECT_GT(j["gemms"].get<int64_t>(), 0);
  EXPECT_LT(j["instructions_after"].get<int64_t>(), j["instructions_before"].get<int64_t>());
  EXPECT_TRUE(j["collectives"].is_object());
  const auto& mem = j["memory_per_device_bytes"];
  EXPECT_EQ(mem["parameters"].get<int64_t>(), 9081664 * 4);  // f32 master weights
  EXPECT_EQ(mem["optimizer_state"].get<int64_t>(), 2 * 9081664 * 4 + 4);  // mu, nu and the step counter
  EXPECT_EQ(mem["total"].get<int64_t>(), mem["parameters"].get<int64_t>() + mem["optimizer_state"].get<int64_t>() +
                                             mem["activations"].get<int64_t>() + mem["temporaries"].get<int64_t>());
  EXPECT_GT(mem["activations"].get<int64_t>(), 0);
}

TEST(CompileCommand, BadConfigIsAUsageError) {
  int code = -1;
  run("compile model_name=gpt-oss-tiny num_experts=7 ici_expert_parallelism=2 local_devices=2", &code);
  EXPECT_EQ(code, 2);
}

}  // namespace
