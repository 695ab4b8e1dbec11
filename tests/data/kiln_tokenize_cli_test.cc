// `kiln tokenize` with the tiktoken encodings as a user runs it: ids <-> text on stdin with
// MaxText-style tokenizer keys, special tokens only when allowed, files -> shards with a
// progress line (plain in logs, redrawn on a terminal) and a re-run that reuses the shards,
// and one-line errors with exit code 2.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "tests/testing/cli.h"

namespace {

using kiln::testing::CliRun;

std::string temp(const std::string& name) {
  return ::testing::TempDir() + "kiln_tokenize_cli_" + std::to_string(getpid()) + "_" + name;
}

CliRun kiln(const std::string& args, const std::string& stdin_text = "") {
  return kiln::testing::run_command(KILN_BINARY, args, stdin_text);
}

const std::string kHarmony = " tokenizer_type=tiktoken tokenizer_path=o200k_harmony";

TEST(KilnTokenizeCli, TiktokenIdsAndDecodeOnStdin) {
  // Ids from the npm package tiktoken (tests/reference/tiktoken_ref.js): "Hello world" is
  // [13225, 2375] in o200k; <|start|> and <|end|> are harmony's 200006 and 200007.
  CliRun ids = kiln("tokenize --ids" + kHarmony, "Hello world\n\n<|endoftext|>\n");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(ids.out.substr(0, ids.out.find('\n')), "13225 2375");
  EXPECT_EQ(std::count(ids.out.begin(), ids.out.end(), '\n'), 3);  // one line per input line, even empty ones
  EXPECT_EQ(ids.out.find("199999"), std::string::npos);            // special text stays text by default
  CliRun allowed = kiln("tokenize --ids --allowed_special=all" + kHarmony, "<|endoftext|>\n");
  ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_EQ(allowed.out, "199999\n");
  CliRun text = kiln("tokenize --ids --decode" + kHarmony, "200006 13225 2375 200007\n" + ids.out);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "<|start|>Hello world<|end|>\nHello world\n\n<|endoftext|>\n");
  // The flag spelling works too.
  CliRun flags = kiln("tokenize --ids --tokenizer_type=tiktoken --tokenizer_path=gpt2", "Hello world\n");
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  EXPECT_EQ(flags.out, "15496 995\n");
}

TEST(KilnTokenizeCli, BadTokenizerInputIsOneLineAndExitCode2) {
  auto one_line = [](const CliRun& r) { return std::count(r.err.begin(), r.err.end(), '\n') == 1; };
  CliRun name = kiln("tokenize --ids tokenizer_type=tiktoken tokenizer_path=o300k", "x\n");
  EXPECT_EQ(name.exit_code, 2);
  EXPECT_NE(name.err.find("tokenizer_path=o300k: unknown tiktoken encoding"), std::string::npos) << name.err;
  EXPECT_TRUE(one_line(name)) << name.err;
  CliRun id = kiln("tokenize --ids --decode" + kHarmony, "13225\n999999\n");
  EXPECT_EQ(id.exit_code, 2);
  EXPECT_NE(id.err.find("stdin:2: token id 999999 is not in the vocabulary"), std::string::npos) << id.err;
  CliRun special = kiln("tokenize --ids --allowed_special=all", "x\n");
  EXPECT_EQ(special.exit_code, 2);
  EXPECT_NE(special.err.find("--allowed_special applies to tokenizer_type=tiktoken"), std::string::npos);
  CliRun unknown_special = kiln("tokenize --ids --allowed_special='<|nope|>'" + kHarmony, "x\n");
  EXPECT_EQ(unknown_special.exit_code, 2);
  CliRun key = kiln("tokenize --ids vocab=3", "x\n");
  EXPECT_EQ(key.exit_code, 2);
  EXPECT_NE(key.err.find("vocab=3: kiln tokenize takes the keys tokenizer_type and tokenizer_path"),
            std::string::npos) << key.err;
  CliRun missing = kiln("tokenize --output " + temp("none") + " " + temp("missing.txt") + kHarmony);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("missing.txt: input file not found"), std::string::npos) << missing.err;
}

TEST(KilnTokenizeCli, FilesToShardsWithProgressAndAResumingReRun) {
  std::string plain = temp("corpus.txt"), jsonl = temp("docs.jsonl"), out = temp("shards");
  {
    std::ofstream p(plain), j(jsonl);
    for (int i = 0; i < 40; ++i) {
      p << "Paragraph " << i << " of a small English corpus.\nIt has two lines.\n\n";
      j << "{\"body\": \"JSON document " << i << " <|endoftext|>\"}\n";
    }
  }
  std::filesystem::remove_all(out);
  std::string args = "tokenize --output " + out + " --threads 2 --chunk_bytes 300 --text_field body " + plain + " " +
                     jsonl + kHarmony;
  CliRun first = kiln(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.out, m, std::regex("tokenized 80 documents, (\\d+) tokens \\(tiktoken:o200k_harmony\\) "
                                                         "into (\\d+) shard\\(s\\), 0 reused")))
      << first.out;
  std::string shards = m[2];
  EXPECT_GT(std::stoi(shards), 2);
  // Not a terminal: plain lines, ending with the "done" line.
  EXPECT_NE(first.err.find("tokenize: done"), std::string::npos) << first.err;
  EXPECT_EQ(first.err.find('\r'), std::string::npos);
  CliRun again = kiln(args);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("into " + shards + " shard(s), " + shards + " reused"), std::string::npos) << again.out;
  // On a terminal the bar is redrawn in place (KILN_PROGRESS=tty forces it here).
  std::filesystem::remove(out + "/shard_00000.bin");
  CliRun tty = kiln::testing::run_command("KILN_PROGRESS=tty " + std::string(KILN_BINARY), args);
  ASSERT_EQ(tty.exit_code, 0) << tty.err;
  EXPECT_NE(tty.err.find('\r'), std::string::npos) << tty.err;
  EXPECT_NE(tty.out.find(std::to_string(std::stoi(shards) - 1) + " reused"), std::string::npos) << tty.out;
  std::filesystem::remove_all(out);
}

}  // namespace
