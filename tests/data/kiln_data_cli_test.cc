// `kiln tokenize` and `kiln train dataset_type=tokens|text` as a user runs them: text -> shards,
// ids <-> text on stdin, a short gpt-oss run on the shards whose loss falls, and one-line
// errors (exit 2, nothing run) for a missing dataset and a vocabulary that is too small.
#include <gtest/gtest.h>

#include "tests/testing/cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

using kiln::testing::CliRun;
using kiln::testing::read_text_file;

std::string temp(const std::string& name) {
  return ::testing::TempDir() + "kiln_data_cli_" + std::to_string(getpid()) + "_" + name;
}

CliRun kiln(const std::string& args, const std::string& stdin_text = "") {
  return kiln::testing::run_command(KILN_BINARY, args, stdin_text);
}

// A small English corpus: enough documents for a few batches of 2 × 16 tokens.
std::string make_corpus() {
  std::string path = temp("corpus.txt");
  std::ofstream out(path);
  const char* lines[] = {"the cat sat on the mat", "a dog ran in the park", "the sun is warm today",
                         "we read a book at night", "the sea is blue and deep", "birds sing in the morning"};
  for (int i = 0; i < 24; ++i) out << lines[i % 6] << "\n\n";
  return path;
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  std::regex re("completed step: \\d+, .* loss: ([0-9.]+),");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) v.push_back(std::stod((*it)[1]));
  return v;
}

const char* kTinyTokens =
    "model_name=gpt-oss-tiny override_model_config=true per_device_batch_size=2 max_target_length=16 "
    "vocab_size=258 base_num_decoder_layers=2 backend=interpreter enable_checkpointing=false "
    "dataset_type=tokens learning_rate=3e-3 warmup_steps_fraction=0";

TEST(KilnTokenizeCli, IdsAndDecodeRoundTripStdin) {
  CliRun ids = kiln("tokenize --ids", "Hi\nwörld\n");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(ids.out, "72 105\n119 195 182 114 108 100\n");
  CliRun text = kiln("tokenize --ids --decode", ids.out);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "Hi\nwörld\n");
  CliRun bad = kiln("tokenize --decode", "1 x\n");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("not a token id"), std::string::npos);
}

TEST(KilnTrainTokens, TokenizeThenTrainGptOssTinyAndTheLossFalls) {
  std::string shards = temp("shards");
  std::filesystem::remove_all(shards);
  CliRun tok = kiln("tokenize --output " + shards + " " + make_corpus());
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  EXPECT_NE(tok.out.find("tokenized 24 documents"), std::string::npos) << tok.out;
  EXPECT_TRUE(std::filesystem::exists(shards + "/manifest.json"));

  std::string dir = temp("out");
  CliRun r = kiln(std::string("train ") + kTinyTokens + " steps=12 dataset_path=" + shards +
                  " run_name=tok base_output_directory=" + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("data: token shards from " + shards), std::string::npos) << r.out;
  std::vector<double> l = losses(r.out);
  ASSERT_EQ(l.size(), 12u) << r.out;
  // Byte-level text starts near ln(258) = 5.55 and the repeated sentences are learned fast.
  double first = l[0], last = (l[9] + l[10] + l[11]) / 3;
  EXPECT_GT(first, 4.5);
  EXPECT_LT(last, first - 1.5) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(KilnTrainTokens, EvalIntervalReportsEvalLossAndPerplexityOnTheHeldOutSplit) {
  std::string shards = temp("shards_eval");
  std::filesystem::remove_all(shards);
  ASSERT_EQ(kiln("tokenize --output " + shards + " " + make_corpus()).exit_code, 0);
  std::string dir = temp("out_eval");
  CliRun r = kiln(std::string("train ") + kTinyTokens + " steps=8 eval_interval=4 eval_steps=1 dataset_path=" +
                  shards + " run_name=ev base_output_directory=" + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("eval: every 4 steps, 1 batches of the held-out split"), std::string::npos) << r.out;
  std::regex re("eval after step (\\d+): eval loss ([0-9.]+), perplexity ([0-9.]+)");
  std::vector<double> eval;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), re), end; it != end; ++it) {
    eval.push_back(std::stod((*it)[2]));
    EXPECT_NEAR(std::stod((*it)[3]), std::exp(eval.back()), 0.01 * std::exp(eval.back()));
  }
  ASSERT_EQ(eval.size(), 2u) << r.out;
  EXPECT_LT(eval[1], eval[0]) << r.out;  // the held-out sentences repeat the training ones
  // Evaluating changes nothing: the same split without an evaluation in 8 steps gives the
  // same training losses.
  CliRun quiet = kiln(std::string("train ") + kTinyTokens + " steps=8 eval_interval=100 eval_steps=1 dataset_path=" +
                      shards + " run_name=ev2 base_output_directory=" + dir);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.out.find("eval after step"), std::string::npos);
  EXPECT_EQ(losses(r.out), losses(quiet.out));
  EXPECT_EQ(losses(r.out).size(), 8u);
  std::filesystem::remove_all(dir);
}

TEST(KilnTrainTokens, BadDataIsOneLineAndExitCode2BeforeTraining) {
  CliRun missing = kiln(std::string("train ") + kTinyTokens + " steps=1 dataset_path=" + temp("nowhere"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("not found"), std::string::npos) << missing.err;
  EXPECT_EQ(missing.out.find("completed step"), std::string::npos);

  std::string shards = temp("shards_vocab");
  std::filesystem::remove_all(shards);
  ASSERT_EQ(kiln("tokenize --output " + shards + " " + make_corpus()).exit_code, 0);
  CliRun vocab = kiln(std::string("train ") + kTinyTokens + " steps=1 vocab_size=200 dataset_path=" + shards);
  EXPECT_EQ(vocab.exit_code, 2) << vocab.err;
  EXPECT_NE(vocab.err.find("not below the model's vocab_size=200"), std::string::npos) << vocab.err;
  EXPECT_EQ(std::count(vocab.err.begin(), vocab.err.end(), '\n'), 1) << vocab.err;
  EXPECT_EQ(vocab.out.find("traced the training step"), std::string::npos);
}

// The default real corpus (Debian's fortunes, scripts/setup.sh): kiln tokenize, then
// dataset_type=tokens with an eval split: the held-out fortunes' eval loss falls. (That two
// runs read the same batches is KilnTrainText.TextFilesAreTokenizedOnceAndCached.)
TEST(KilnTrainTokens, FortunesCorpusTrainsWithAFallingEvalLoss) {
  const std::string fortunes = "/usr/share/games/fortunes/";
  if (!std::filesystem::exists(fortunes + "fortunes")) GTEST_SKIP() << "fortunes not installed: run scripts/setup.sh";
  std::string shards = temp("fortunes");
  std::filesystem::remove_all(shards);
  CliRun tok = kiln("tokenize --output " + shards + " " + fortunes + "fortunes " + fortunes + "literature " +
                    fortunes + "riddles");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  std::string dir = temp("out_fortunes");
  const std::string args = std::string("train ") + kTinyTokens + " max_target_length=32 steps=10 eval_interval=5 " +
                           "eval_steps=2 base_output_directory=" + dir + " dataset_path=" + shards;
  CliRun a = kiln(args + " run_name=a");
  ASSERT_EQ(a.exit_code, 0) << a.err << a.out;
  std::regex re("eval after step (\\d+): eval loss ([0-9.]+)");
  std::vector<double> eval;
  for (std::sregex_iterator it(a.out.begin(), a.out.end(), re), end; it != end; ++it) eval.push_back(std::stod((*it)[2]));
  ASSERT_EQ(eval.size(), 2u) << a.out;
  // Measured 3.73 -> 3.41 (ln 258 = 5.55 is uniform over bytes): English byte statistics.
  EXPECT_LT(eval[1], eval[0] - 0.1) << a.out;
  EXPECT_LT(eval[1], 4.5) << a.out;
  EXPECT_NE(a.out.find("data_wait: "), std::string::npos);
  EXPECT_EQ(losses(a.out).size(), 10u);
  std::filesystem::remove_all(dir);
}

// dataset_type=text: the first run tokenizes into dataset_cache_dir, the second reads the
// cache, and both train on the same batches (whatever the prefetch depth).
TEST(KilnTrainText, TextFilesAreTokenizedOnceAndCached) {
  std::string cache = temp("text_cache");
  std::filesystem::remove_all(cache);
  std::string dir = temp("out_text");
  const std::string args = std::string("train ") + kTinyTokens + " dataset_type=text tokenizer_type=bytes steps=3 " +
                           "dataset_path=" + make_corpus() + " dataset_cache_dir=" + cache +
                           " base_output_directory=" + dir;
  CliRun first = kiln(args + " run_name=t1");
  ASSERT_EQ(first.exit_code, 0) << first.err << first.out;
  EXPECT_NE(first.out.find("-> 24 documents, "), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("(tokenized now into " + cache), std::string::npos) << first.out;
  CliRun second = kiln(args + " run_name=t2 prefetch_depth=0");  // batches on the step's thread: the same
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("(cached in " + cache), std::string::npos) << second.out;
  EXPECT_EQ(losses(first.out), losses(second.out));
  std::filesystem::remove_all(dir);
}

TEST(KilnTrainText, MissingTextFileIsOneLineAndExitCode2) {
  CliRun r = kiln(std::string("train ") + kTinyTokens + " dataset_type=text tokenizer_type=bytes steps=1 dataset_path=" +
                  temp("no_such.txt") + " dataset_cache_dir=" + temp("unused_cache"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no_such.txt: text file or directory not found"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out.find("traced the training step"), std::string::npos);
}

}  // namespace
