// `kiln train dataset_type=hf` as a user runs it, on small datasets written by PyPI's pyarrow
// in the layouts people download (tests/reference/make_hf_datasets.py): Parquet in the
// Hugging Face datasets layout, JSONL.gz and JSONL.zst. gpt-oss-tiny trains on each; a run
// killed (SIGKILL) after its checkpoint resumes with exactly the losses of the uninterrupted
// run, on one device and on fsdp 2; bad input is one line naming what is wrong.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/cli.h"

namespace {

namespace fs = std::filesystem;
using kiln::testing::CliRun;
using kiln::testing::run_command;

// The datasets, written once per test binary run.
const fs::path& datasets() {
  static const fs::path dir = [] {
    fs::path d = kiln::testing::fresh_temp_dir("kiln_hf_datasets");
    const std::string python = KILN_VENV_PYTHON;
    if (!fs::exists(python)) {
      ADD_FAILURE() << python << " is missing: run scripts/setup_venv.sh (pyarrow from PyPI)";
      return d;
    }
    CliRun r = run_command(python, std::string(KILN_SOURCE_DIR) + "/tests/reference/make_hf_datasets.py " + d.string());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return d;
  }();
  return dir;
}

std::string tiny(const std::string& extra) {
  return "train model_name=gpt-oss-tiny override_model_config=true per_device_batch_size=2 max_target_length=64 "
         "base_num_decoder_layers=2 vocab_size=258 tokenizer_type=bytes learning_rate=3e-3 backend=cpu "
         "dataset_type=hf " +
         extra;
}

std::vector<double> losses_of(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"loss\": ");
    if (at != std::string::npos) out.push_back(std::stod(line.substr(at + 8)));
  }
  return out;
}

// The "batch_hash" of every record, in order.
std::vector<std::string> hashes_of(const fs::path& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"batch_hash\": \"");
    if (at != std::string::npos) out.push_back(line.substr(at + 15, 16));
  }
  return out;
}

class HfDataset : public ::testing::TestWithParam<const char*> {};

TEST_P(HfDataset, TrainsGptOssTinyWithFallingLoss) {
  const fs::path out = kiln::testing::fresh_temp_dir(std::string("kiln_hf_train_") + GetParam());
  CliRun r = run_command(KILN_BINARY, tiny("steps=12 enable_checkpointing=false eval_interval=6 eval_steps=2 hf_path=" +
                                           (datasets() / GetParam()).string() + " run_name=run base_output_directory=" +
                                           out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data: streaming training 3 file(s) ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval loss"), std::string::npos) << r.out;
  const std::vector<double> losses = losses_of(out / "run" / "metrics.jsonl");
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Formats, HfDataset, ::testing::Values("parquet", "gz", "zst"));

// A 70/30 mixture of the Parquet and the JSONL.zst datasets: the tokens each source gave,
// logged in metrics.jsonl, match the weights within 2 %.
TEST(HfDatasetMixture, PerSourceTokenCountsMatchTheWeights) {
  const fs::path out = kiln::testing::fresh_temp_dir("kiln_hf_mixture");
  const std::string mixture = (datasets() / "parquet").string() + ":data/*.parquet,0.7;" + (datasets() / "zst").string() + ",0.3";
  CliRun r = run_command(KILN_BINARY, tiny("steps=80 enable_checkpointing=false data_mixture='" +
                                           mixture + "' run_name=run base_output_directory=" + out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data: streaming training parquet 70.0%: 3 file(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("zst 30.0%: 3 file(s)"), std::string::npos) << r.out;
  std::ifstream in(out / "run" / "metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const size_t at = last.find("\"data_tokens\": ");
  ASSERT_NE(at, std::string::npos) << last;
  const std::string counts = last.substr(at);
  auto count_of = [&](const std::string& name) {
    const size_t p = counts.find("\"" + name + "\":");
    EXPECT_NE(p, std::string::npos) << counts;
    return p == std::string::npos ? 0.0 : std::stod(counts.substr(p + name.size() + 3));
  };
  const double parquet = count_of("parquet"), zst = count_of("zst");
  // 80 steps of 2 rows of 64 tokens, mostly full (a document that does not fit what is left
  // of a row starts the next one).
  EXPECT_GT(parquet + zst, 0.8 * 80 * 2 * 64) << counts;
  EXPECT_NEAR(zst / (parquet + zst), 0.3, 0.02) << counts;
}

// Run to 8 steps with a checkpoint at 4; the same run killed after step 5 and started again
// resumes from step 4 and logs the uninterrupted run's batches (by content hash) and losses
// (bit for bit) for steps 4-7.
void check_kill_and_resume(const std::string& mesh, const std::string& name) {
  const std::string data = "hf_path=" + (datasets() / "parquet").string() + " hf_data_dir=data ";
  const std::string common = tiny(data + "steps=8 checkpoint_period=4 async_checkpointing=false " + mesh);
  const fs::path whole = kiln::testing::fresh_temp_dir("kiln_hf_whole_" + name);
  CliRun a = run_command(KILN_BINARY, common + " run_name=run base_output_directory=" + whole.string());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  const std::vector<double> expected = losses_of(whole / "run" / "metrics.jsonl");
  ASSERT_EQ(expected.size(), 8u);
  const std::vector<std::string> expected_hashes = hashes_of(whole / "run" / "metrics.jsonl");
  ASSERT_EQ(expected_hashes.size(), 8u);

  const fs::path killed = kiln::testing::fresh_temp_dir("kiln_hf_killed_" + name);
  const fs::path metrics = killed / "run" / "metrics.jsonl";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string cmd = std::string(KILN_BINARY) + " " + common + " run_name=run base_output_directory=" +
                            killed.string() + " >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill once step 5 is logged (the checkpoint of step 4 is then complete).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (losses_of(metrics).size() < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_GE(losses_of(metrics).size(), 6u) << "the run did not reach step 5";
  CliRun b = run_command(KILN_BINARY, common + " run_name=run base_output_directory=" + killed.string());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("restored the full training state of step 4"), std::string::npos) << b.out;
  const std::vector<double> resumed = losses_of(metrics);
  ASSERT_EQ(resumed.size(), 8u) << "metrics.jsonl keeps each step once";
  const std::vector<std::string> hashes = hashes_of(metrics);
  ASSERT_EQ(hashes.size(), 8u);
  for (size_t s = 0; s < 8; ++s) {
    EXPECT_EQ(hashes[s], expected_hashes[s]) << "the batch of step " << s << " (" << name << ")";
    EXPECT_EQ(resumed[s], expected[s]) << "step " << s << " (" << name << ")";
  }
}

TEST(HfDatasetResume, KilledAndResumedOnOneDeviceSeesTheSameBatches) { check_kill_and_resume("", "one"); }

TEST(HfDatasetResume, KilledAndResumedOnFsdp2SeesTheSameBatches) {
  check_kill_and_resume("local_devices=2 ici_fsdp_parallelism=2", "fsdp2");
}

TEST(HfDatasetErrors, BadInputIsOneLineNamingWhatIsWrong) {
  const fs::path out = kiln::testing::fresh_temp_dir("kiln_hf_errors");
  auto error_of = [&](const std::string& extra) {
    CliRun r = run_command(KILN_BINARY, tiny("steps=1 enable_checkpointing=false run_name=e base_output_directory=" +
                                             out.string() + " " + extra));
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    return r.err;
  };
  const std::string parquet = (datasets() / "parquet").string();
  std::string e = error_of("hf_path=" + parquet + " train_data_columns=content");
  EXPECT_NE(e.find("content"), std::string::npos) << e;
  EXPECT_NE(e.find("text"), std::string::npos) << e;  // the columns it has
  e = error_of("hf_path=" + (out / "nowhere").string());
  EXPECT_NE(e.find("nowhere"), std::string::npos) << e;
  e = error_of("hf_path=" + parquet + " hf_train_files=*.csv");
  EXPECT_NE(e.find("*.csv"), std::string::npos) << e;
  e = error_of("hf_path=" + parquet + " train_data_columns=text,url");
  EXPECT_NE(e.find("train_data_columns=text,url: expected one column name"), std::string::npos) << e;
  e = error_of("hf_path=" + parquet + " eval_interval=2");
  EXPECT_NE(e.find("needs eval_steps > 0"), std::string::npos) << e;
  e = error_of("hf_path=" + (datasets() / "zst").string() + " data_mixture='" + parquet + ",0.7;x'");
  EXPECT_NE(e.find("data_mixture entry 'x': expected DIR[:GLOB],WEIGHT"), std::string::npos) << e;
  e = error_of("data_mixture='" + parquet + ",0.7;" + (datasets() / "zst").string() + ",-0.3'");
  EXPECT_NE(e.find(",-0.3': expected DIR[:GLOB],WEIGHT with a weight > 0"), std::string::npos) << e;
  e = error_of("data_mixture='" + parquet + ",0'");
  EXPECT_NE(e.find("with a weight > 0"), std::string::npos) << e;
  fs::create_directories(out / "empty");
  e = error_of("hf_path=" + (out / "empty").string());
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  // Refused before anything is written: no run directory, so no checkpoint or record.
  EXPECT_FALSE(fs::exists(out / "e")) << "a refused run wrote its directory";
  // A corrupt file met mid-run (the second file, cut short) stops the run before the step
  // that would have read it, in one line naming the file; the steps before it are logged.
  const fs::path cut = out / "cut";
  fs::create_directories(cut);
  {
    std::ofstream a(cut / "a.jsonl");  // a few rows' worth of good documents first
    for (int i = 0; i < 12; ++i) a << "{\"text\": \"A good document, number " << i << ", long enough to fill half a row.\"}\n";
  }
  fs::copy_file(datasets() / "zst" / "part-00001.jsonl.zst", cut / "b.jsonl.zst");
  fs::resize_file(cut / "b.jsonl.zst", fs::file_size(cut / "b.jsonl.zst") / 2);
  CliRun mid = run_command(KILN_BINARY, tiny("steps=200 enable_checkpointing=false enable_data_shuffling=false "
                                             "run_name=cut base_output_directory=" + out.string() +
                                             " hf_path=" + cut.string()));
  EXPECT_NE(mid.exit_code, 0) << mid.out;
  EXPECT_EQ(std::count(mid.err.begin(), mid.err.end(), '\n'), 1) << mid.err;
  EXPECT_NE(mid.err.find("b.jsonl.zst"), std::string::npos) << mid.err;
  const size_t logged = losses_of(out / "cut" / "metrics.jsonl").size();
  EXPECT_GT(logged, 0u);
  EXPECT_LT(logged, 20u);
  // Without the Parquet module (a kiln carried without it), Parquet is one line saying so.
  CliRun r = run_command("KILN_PARQUET_MODULE=" + (out / "none.so").string() + " " + KILN_BINARY,
                         tiny("steps=1 enable_checkpointing=false run_name=m base_output_directory=" + out.string() +
                              " hf_path=" + parquet));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("reading Parquet needs Kiln's Parquet module"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("none.so"), std::string::npos) << r.err;
}

}  // namespace
