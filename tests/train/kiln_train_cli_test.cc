// `kiln train` as a user runs it: a short GPT-OSS run whose loss falls, the start-up report,
// exit code 2 for a bad config (one line on stderr, nothing run) and 1 for a NaN loss.
#include <gtest/gtest.h>

#include "tests/testing/cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

using kiln::testing::CliRun;

CliRun kiln(const std::string& args) { return kiln::testing::run_command(KILN_BINARY, args); }

std::string out_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "kiln_train_cli_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// gpt-oss-tiny cut to 2 layers, vocabulary 64 and 16 tokens, so a step takes well under a second.
const char* kSmallGptOss =
    "model_name=gpt-oss-tiny override_model_config=true per_device_batch_size=1 max_target_length=16 "
    "vocab_size=64 base_num_decoder_layers=2 backend=interpreter reuse_example_batch=1";

TEST(KilnTrainCli, ShortRunLogsMaxTextLinesAndTheLossFalls) {
  std::string dir = out_dir("run");
  CliRun r = kiln(std::string("train ") + kSmallGptOss + " steps=6 learning_rate=3e-3 warmup_steps_fraction=0 " +
                  "run_name=cli base_output_directory=" + dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("number parameters: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Per train step: Total TFLOPs: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compile/trace time: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("completed step: 0, seconds: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("completed step: 5, seconds: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total_weights: 16, loss: "), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/cli/metrics.jsonl"));
  // "finished 6 steps: loss A -> B" with B < A.
  size_t at = r.out.find("finished 6 steps: loss ");
  ASSERT_NE(at, std::string::npos) << r.out;
  double first = 0, last = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "finished 6 steps: loss %lf -> %lf", &first, &last), 2);
  EXPECT_LT(last, first);
}

TEST(KilnTrainCli, DryRunPrintsTheReferenceRunsStartupReport) {
  CliRun r = kiln(std::string("train --dry-run ") + KILN_SOURCE_DIR + "/configs/gpt-oss-3.5b-v6e4.yml");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("number parameters: 3.525 billion\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Per train step: Total TFLOPs: 4.04, split as 97.13% learnable weight flops and 2.87% "
                       "attention flops\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("completed step"), std::string::npos) << r.out;
}

TEST(KilnTrainCli, BadConfigExitsTwoWithOneLine) {
  CliRun r = kiln("train steps=abc");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "kiln: error: steps=abc: expected an integer, got abc\n");
  CliRun ga = kiln(std::string("train ") + kSmallGptOss + " gradient_accumulation_steps=0 base_output_directory=" +
                   out_dir("ga"));
  EXPECT_EQ(ga.exit_code, 2);
  EXPECT_NE(ga.err.find("gradient_accumulation_steps=0"), std::string::npos) << ga.err;
  EXPECT_EQ(ga.err.find('\n'), ga.err.size() - 1) << ga.err;
  EXPECT_EQ(ga.out.find("completed step"), std::string::npos) << ga.out;
}

TEST(KilnTrainCli, NanLossExitsOne) {
  // A learning rate of 1e30 blows the weights up: the loss is NaN on the second step.
  CliRun r = kiln(std::string("train ") + kSmallGptOss +
                  " learning_rate=1e30 warmup_steps_fraction=0 steps=5 run_name=nan base_output_directory=" +
                  out_dir("nan"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("kiln: error: loss is"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopping the run (abort_on_"), std::string::npos) << r.err;
}

}  // namespace
