// Runs the built `kiln` binary the way a user does and checks exit codes, stdout and the
// one-line error on stderr.
#include <gtest/gtest.h>

#include "tests/testing/cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

using kiln::testing::CliRun;

// `args` is passed through the shell, so quote what needs quoting.
CliRun kiln(const std::string& args) { return kiln::testing::run_command(KILN_BINARY, args); }

TEST(KilnCli, VersionAndHelpExitZero) {
  CliRun v = kiln("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("kiln ", 0), 0u) << v.out;
  CliRun h = kiln("--help");
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("config"), std::string::npos) << h.out;
  CliRun ch = kiln("config --help");
  EXPECT_EQ(ch.exit_code, 0);
  EXPECT_NE(ch.out.find("gpt-oss-20b"), std::string::npos) << ch.out;  // lists the models
}

TEST(KilnCli, ConfigPrintsTheResolvedConfig) {
  CliRun r = kiln("config model_name=gpt-oss-20b");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("base_emb_dim: 2880  # model\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  num_query_heads: 64\n"), std::string::npos);
  EXPECT_NE(r.out.find("  num_decoder_layers: 24\n"), std::string::npos);
  EXPECT_NE(r.out.find("  num_devices: 1\n"), std::string::npos);
  EXPECT_NE(r.out.find("  global_batch_size: 12\n"), std::string::npos);
  EXPECT_EQ(r.err, "");
}

TEST(KilnCli, ConfigFileAndVerbosityFlagInAnyPosition) {
  CliRun r = kiln(std::string("--v=1 config ") + KILN_SOURCE_DIR +
               "/configs/gpt-oss-3.5b-v6e4.yml --v=2 steps=5 --no-derived");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("steps: 5  # override\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ici_expert_parallelism: 2  # config\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("derived:"), std::string::npos);
}

TEST(KilnCli, BadMeshIsAUsageErrorOnOneLine) {
  CliRun r = kiln("config local_devices=4 ici_fsdp_parallelism=3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "kiln: error: mesh: the ici_* parallelism sizes multiply to 3 "
            "(ici_fsdp_parallelism=3), but the mesh needs 4 devices (local_devices=4); make them "
            "multiply to 4 or set one to -1\n");
}

TEST(KilnCli, ConfigErrorsExitTwo) {
  for (const char* args : {"config ici_fsdp_paralelism=2", "config steps=abc",
                           "config model_name=nope", "config no_such_file.yml",
                           "config dtype=float64"}) {
    CliRun r = kiln(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err.rfind("kiln: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": " << r.err;  // one line
  }
}

TEST(KilnCli, BadUsageExitsTwo) {
  for (const char* args : {"", "frobnicate", "config --bogus", "--v=x config"}) {
    CliRun r = kiln(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err.rfind("kiln: error: ", 0), 0u) << args << ": " << r.err;
  }
}

}  // namespace
