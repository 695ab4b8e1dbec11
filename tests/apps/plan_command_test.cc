// `kiln plan` as a user runs it: the prediction's parts add up and agree with `kiln compile`,
// MoE routing bounds are ordered, --search ranks meshes, --calibrate writes a target that
// plan reads, and bad input (a target, a mesh, a model that fits nowhere) is one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/cli.h"
#include "tests/testing/temp_path.h"

namespace {

// Progress lines (kernel compiles) off: stderr holds only what the command reports.
kiln::testing::CliRun run_command(const std::string& binary, const std::string& args) {
  return kiln::testing::run_command("KILN_PROGRESS=off " + binary, args);
}

const std::string kTiny = "model_name=gpt-oss-tiny override_model_config=true per_device_batch_size=1 max_target_length=64";

nlohmann::json plan_json(const std::string& args) {
  kiln::testing::CliRun r = run_command(KILN_BINARY, "plan --json " + args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(PlanCommand, ThePartsAddUpToTheStep) {
  nlohmann::json j = plan_json(kTiny + " target=h100");
  const double step = j["step_s"].get<double>();
  EXPECT_GT(step, 0);
  double compute = 0;
  for (const auto& [name, c] : j["compute"].items()) compute += c["seconds"].get<double>();
  EXPECT_NEAR(compute, j["compute_s"].get<double>(), 1e-12);
  EXPECT_NEAR(step, j["compute_s"].get<double>() + j["exposed_s"].get<double>() + j["host_s"].get<double>(), 1e-9);
  EXPECT_GT(j["compute"]["gemm"]["kernels"].get<int64_t>(), 0);
  EXPECT_NEAR(j["mfu"].get<double>(), j["tflops_per_step_per_device"].get<double>() / step / 67.0, 1e-12);  // f32 peak
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_TRUE(j["collectives"].empty());  // one device
  // Memory is the compiled step's, as kiln compile reports it.
  kiln::testing::CliRun c = run_command(KILN_BINARY, "compile --json " + kTiny);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(j["memory_per_device_bytes"], nlohmann::json::parse(c.out)["memory_per_device_bytes"]);
  // bf16 runs against the bf16 peak, its GEMMs faster (the tiny step as a whole is bound by
  // its small kernels, so the step need not be).
  nlohmann::json b = plan_json(kTiny + " target=h100 dtype=bfloat16");
  EXPECT_EQ(b["peak_tflops"].get<double>(), 989);
  EXPECT_LT(b["compute"]["gemm"]["seconds"].get<double>(), j["compute"]["gemm"]["seconds"].get<double>());
}

TEST(PlanCommand, ExpertParallelStepHasRoutingBoundsAndCollectives) {
  nlohmann::json j = plan_json(kTiny + " local_devices=2 ici_fsdp_parallelism=1 ici_expert_parallelism=2 target=tpu-v6e");
  EXPECT_EQ(j["devices"].get<int64_t>(), 2);
  EXPECT_TRUE(j["collectives"].contains("ragged_all_to_all")) << j["collectives"].dump();
  EXPECT_GE(j["overlapped_s"].get<double>(), 0);
  const auto& r = j["routing"];
  EXPECT_EQ(r["expert_axis"].get<int64_t>(), 2);
  EXPECT_LT(r["balanced_s"].get<double>(), r["worst_s"].get<double>());
  EXPECT_DOUBLE_EQ(r["balanced_s"].get<double>(), j["step_s"].get<double>());
  // Under the load a run observed: max/mean 1.5 on every layer -> 1.5 / 2 of the buffer.
  const std::filesystem::path run = kiln::testing::fresh_temp_dir("kiln_plan_routing");
  std::ofstream(run / "metrics.jsonl") << "{\"step\": 0, \"loss\": 5}\n"
                                       << "{\"step\": 1, \"expert_load\": [[6, 4, 0], [3, 2, 0]]}\n";
  nlohmann::json o = plan_json(kTiny + " local_devices=2 ici_fsdp_parallelism=1 ici_expert_parallelism=2 target=tpu-v6e "
                               "--routing-from " + run.string());
  EXPECT_DOUBLE_EQ(o["routing"]["observed_load"].get<double>(), 0.75);
  EXPECT_GT(o["routing"]["observed_s"].get<double>(), o["routing"]["balanced_s"].get<double>());
  EXPECT_LT(o["routing"]["observed_s"].get<double>(), o["routing"]["worst_s"].get<double>());
  std::filesystem::remove_all(run);
}

TEST(PlanCommand, SearchRanksTheMeshesThatFit) {
  kiln::testing::CliRun r = run_command(KILN_BINARY, "plan --search " + kTiny + " local_devices=2 target=h100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1. fsdp="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("candidates compiled"), std::string::npos) << r.out;
  kiln::testing::CliRun j = run_command(KILN_BINARY, "plan --search --json " + kTiny + " local_devices=2 target=h100");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  nlohmann::json rows = nlohmann::json::parse(j.out);
  ASSERT_GE(rows.size(), 4u);  // fsdp 2, expert 2, tensor 2, data 2, each with and without remat
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_LE(rows[i - 1]["step_s"].get<double>(), rows[i]["step_s"].get<double>());
  }
}

// A copy of h100.yml with `capacity` GiB per device.
std::string target_with_capacity(double capacity, const std::string& name) {
  const std::filesystem::path dir = kiln::testing::fresh_temp_dir("kiln_plan_" + name);
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/configs/targets/h100.yml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t at = text.find("capacity_gib:");
  text.replace(at, text.find('#', at) - at, "capacity_gib: " + std::to_string(capacity) + "  ");
  const std::string path = (dir / (name + ".yml")).string();
  std::ofstream(path) << text;
  return path;
}

// One device, 8 sequences per step: on a target with room for the step in 8 micro-batches of
// one sequence but not in one of 8 (with or without remat), the search splits the batch and
// says so; the global batch stays 8.
TEST(PlanCommand, SearchSplitsTheBatchIntoMicroBatchesWhereItDoesNotFit) {
  const std::string big = "model_name=gpt-oss-tiny override_model_config=true max_target_length=512 local_devices=1";
  auto gib = [](const nlohmann::json& j) { return j["memory_per_device_bytes"]["total"].get<double>() / (1 << 30); };
  const double whole = std::min(gib(plan_json(big + " per_device_batch_size=8 target=h100")),
                                gib(plan_json(big + " per_device_batch_size=8 remat_policy=full target=h100")));
  const double split = gib(plan_json(big + " per_device_batch_size=1 gradient_accumulation_steps=8 target=h100"));
  ASSERT_LT(split, whole) << "8 micro-batches should need less memory than one";
  const std::string target = target_with_capacity((split + whole) / 2, "micro");
  kiln::testing::CliRun r =
      run_command(KILN_BINARY, "plan --search --json " + big + " per_device_batch_size=8 target=" + target);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_FALSE(rows.empty());
  EXPECT_TRUE(rows[0]["fits"].get<bool>());
  EXPECT_GT(rows[0]["gradient_accumulation_steps"].get<int64_t>(), 1) << rows.dump(2);
  for (const auto& row : rows) {
    EXPECT_EQ(8 % row["gradient_accumulation_steps"].get<int64_t>(), 0) << row.dump();
    if (row["gradient_accumulation_steps"].get<int64_t>() == 1) {
      EXPECT_FALSE(row["fits"].get<bool>()) << row.dump();
    }
  }
}

TEST(PlanCommand, BadInputIsOneLine) {
  auto one_line = [](const kiln::testing::CliRun& r) {
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  kiln::testing::CliRun r = run_command(KILN_BINARY, "plan " + kTiny + " target=tpu-v9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown target 'tpu-v9'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tpu-v6e"), std::string::npos) << r.err;
  one_line(r);
  r = run_command(KILN_BINARY, "plan " + kTiny + " local_devices=3 ici_fsdp_parallelism=2 target=h100");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  one_line(r);
  const std::string small = target_with_capacity(0.001, "small");  // room for almost nothing
  r = run_command(KILN_BINARY, "plan " + kTiny + " target=" + small);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
  r = run_command(KILN_BINARY, "plan --search " + kTiny + " local_devices=2 target=" + small);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not fit"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("try about"), std::string::npos) << r.err;
  one_line(r);
  r = run_command(KILN_BINARY, "plan " + kTiny + " target=h100 --routing-from /nonexistent/run");
  EXPECT_EQ(r.exit_code, 2);
  one_line(r);
}

TEST(PlanCommand, CalibrateWritesATargetThatPlanReads) {
  // Measures the link between two MPI ranks too (mpiexec, as the MPI tests run it).
  const std::filesystem::path dir = kiln::testing::fresh_temp_dir("kiln_plan_calibrate");
  const std::string out = (dir / "cpu.yml").string();
  kiln::testing::CliRun r = run_command(KILN_BINARY, "plan --calibrate " + kTiny + " --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* line : {"peaks:", "memory bandwidth:", "inter link:", "gemm:", "fused:", "host:"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  // The link between MPI ranks, measured by the job --calibrate launched.
  std::ifstream in(out);
  const std::string written((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(written.find("MPI between 2 ranks, one device each"), std::string::npos) << written;
  nlohmann::json j = plan_json(kTiny + " target=" + out);
  EXPECT_EQ(j["target"].get<std::string>(), "cpu");
  EXPECT_GT(j["host_s"].get<double>(), 0);  // measured between the instructions
  std::filesystem::remove_all(dir);
}

}  // namespace
