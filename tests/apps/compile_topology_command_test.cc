// `kiln compile backend=pjrt compile_topology=...` as a user runs it: the reference config
// (configs/gpt-oss-3.5b-v6e4.yml) compiled ahead of time for 4 H100s through XLA's CUDA plugin
// (installed by make; no GPU needed), with XLA's memory and census beside Kiln's plan; a
// config too large for the slice refused in one line naming the smallest change that fits;
// bad names and training on a topology refused before any work.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/cli.h"

namespace {

const std::string kReference = std::string(KILN_SOURCE_DIR) + "/configs/gpt-oss-3.5b-v6e4.yml";

kiln::testing::CliRun kiln_run(const std::string& args) { return kiln::testing::run_command(KILN_BINARY, args); }

TEST(CompileTopologyCommand, ReferenceConfigForFourH100s) {
  kiln::testing::CliRun r = kiln_run("compile --json " + kReference + " backend=pjrt compile_topology=h100-4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["devices"].get<int64_t>(), 4);
  EXPECT_TRUE(j["fits"].get<bool>());
  ASSERT_TRUE(j.contains("xla_report")) << r.out;
  const auto& x = j["xla_report"];
  EXPECT_EQ(x["platform"].get<std::string>(), "cuda");
  const auto& m = x["memory_per_device_bytes"];
  // The state (f32 parameters and both moments, a quarter each: 12 B x 3.53e9 / 4 = 10.6e9
  // bytes) is an argument and, donated, aliased to the outputs.
  EXPECT_GT(m["arguments"].get<int64_t>(), 10'000'000'000);
  EXPECT_LT(m["arguments"].get<int64_t>(), 14'000'000'000);
  EXPECT_GT(m["aliased"].get<int64_t>(), 10'000'000'000);
  EXPECT_GT(m["temporaries"].get<int64_t>(), 0);
  // XLA's own peak: at most everything live at once, at least the state and the temporaries.
  EXPECT_LE(m["peak"].get<int64_t>(), m["arguments"].get<int64_t>() + m["outputs"].get<int64_t>() -
                                          m["aliased"].get<int64_t>() + m["temporaries"].get<int64_t>());
  EXPECT_GE(m["peak"].get<int64_t>(), m["aliased"].get<int64_t>() + m["temporaries"].get<int64_t>() / 2);
  EXPECT_NEAR(static_cast<double>(m["capacity"].get<int64_t>()) / (1 << 30), 79.6, 0.01);
  const auto& c = x["census"];
  EXPECT_GT(c["fusions"].get<int64_t>(), 100);
  EXPECT_GT(c["gemms"].get<int64_t>(), 16 * 4);  // every layer's q, k, v, o projections at least
  // fsdp 2: weights gathered, gradients reduce-scattered; expert 2: tokens exchanged.
  EXPECT_GT(c["collectives"]["all-gather"].get<int64_t>(), 0);
  EXPECT_GT(c["collectives"]["reduce-scatter"].get<int64_t>(), 0);
  EXPECT_GT(c["collectives"]["all-to-all"].get<int64_t>(), 0);
  // Kiln's own plan for the same target, and XLA's peak within reach of it.
  ASSERT_TRUE(j.contains("kiln_plan"));
  const int64_t kiln_total = j["kiln_plan"]["memory_per_device_bytes"]["total"].get<int64_t>();
  EXPECT_GT(kiln_total, 10'000'000'000);
  EXPECT_LT(static_cast<double>(m["peak"].get<int64_t>()), 3.0 * static_cast<double>(kiln_total));
  EXPECT_GT(j["kiln_plan"]["step_s"].get<double>(), 0);
}

TEST(CompileTopologyCommand, TooLargeIsRefusedWithTheSmallestChange) {
  // 3.5e9 parameters with f32 moments (42 GB) and bf16 copies on one 31.25 GiB v6e chip: the
  // state alone cannot fit, so XLA is not asked (and libtpu is not needed).
  kiln::testing::CliRun r = kiln_run("compile " + kReference +
                                     " backend=pjrt compile_topology=v6e-1 ici_fsdp_parallelism=1 ici_expert_parallelism=1");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("compile_topology=v6e-1 does not fit: the state alone"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the smallest change that fits: compile_topology=v6e-4 ici_fsdp_parallelism=4"), std::string::npos)
      << r.err;
  // The verdict is the last line of stderr, and one line (the lines before it are the kernel
  // compiler's progress for Kiln's plan).
  const size_t verdict = r.err.rfind("kiln: error: ");
  ASSERT_NE(verdict, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n', verdict), r.err.size() - 1) << "one line: " << r.err;
}

TEST(CompileTopologyCommand, RefusalsBeforeAnyWork) {
  kiln::testing::CliRun bad = kiln_run("compile model_name=gpt-oss-tiny backend=pjrt compile_topology=h100-12");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("accepted: v6e-N"), std::string::npos) << bad.err;
  kiln::testing::CliRun cpu = kiln_run("compile model_name=gpt-oss-tiny compile_topology=h100-4");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.err.find("add backend=pjrt"), std::string::npos) << cpu.err;
  kiln::testing::CliRun train = kiln_run("train model_name=gpt-oss-tiny backend=pjrt compile_topology=h100-1 steps=1");
  EXPECT_EQ(train.exit_code, 2);
  EXPECT_NE(train.err.find("nothing can train on it"), std::string::npos) << train.err;
}

}  // namespace
