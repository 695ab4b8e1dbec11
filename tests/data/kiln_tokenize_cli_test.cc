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
#include "tests/testing/tiktoken_files.h"

namespace {

using kiln::testing::CliRun;

std::string temp(const std::string& name) {
  return ::testing::TempDir() + "kiln_tokenize_cli_" + std::to_string(getpid()) + "_" + name;
}

CliRun kiln(const std::string& args, const std::string& stdin_text = "") {
  return kiln::testing::run_command(KILN_BINARY, args, stdin_text);
}

const std::string kTokenizerDir = kiln::testing::tiktoken_test_dir();
const std::string kHarmony = " tokenizer_type=tiktoken tokenizer_path=o200k_harmony";

TEST(KilnTokenizeCli, TiktokenIdsAndDecodeOnStdin) {
  KILN_REQUIRE_TIKTOKEN_FILES();
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
  EXPECT_NE(key.err.find("vocab=3: kiln tokenize takes the keys tokenizer_type, tokenizer_path and tokenizer_dir"),
            std::string::npos) << key.err;
  CliRun missing = kiln("tokenize --output " + temp("none") + " " + temp("missing.txt") + kHarmony);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("missing.txt: input file not found"), std::string::npos) << missing.err;
}

// A rank file that is missing, truncated or altered, an unknown name and a missing directory:
// one line naming the file (and the line) and what is accepted, exit code 2.
TEST(KilnTokenizeCli, BadTiktokenFilesAreOneLineNamingTheFile) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  auto one_line = [](const CliRun& r) { return std::count(r.err.begin(), r.err.end(), '\n') == 1; };
  const std::string dir = temp("encodings");
  std::filesystem::create_directories(dir);
  const std::string published = kiln::testing::read_text_file(kTokenizerDir + "/cl100k_base.tiktoken");
  ASSERT_GT(published.size(), 1000000u) << kTokenizerDir << " has no cl100k_base.tiktoken";
  const std::string gpt2 = kiln::testing::read_text_file(kTokenizerDir + "/gpt2.tiktoken");

  // Cut inside a line: the line is named, with what a line holds.
  std::ofstream(dir + "/cl100k_base.tiktoken", std::ios::binary) << published.substr(0, 1000) << "\n";
  CliRun cut = kiln("tokenize --ids tokenizer_type=tiktoken tokenizer_path=cl100k_base tokenizer_dir=" + dir, "x\n");
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_NE(cut.err.find(dir + "/cl100k_base.tiktoken:"), std::string::npos) << cut.err;
  EXPECT_NE(cut.err.find("expected \"BASE64TOKEN RANK\""), std::string::npos) << cut.err;
  EXPECT_TRUE(one_line(cut)) << cut.err;
  // Cut at a line end: every line reads, the digest tells.
  std::ofstream(dir + "/cl100k_base.tiktoken", std::ios::binary) << published.substr(0, published.rfind('\n', 50000) + 1);
  CliRun truncated = kiln("tokenize --ids --tokenizer_type=tiktoken --tokenizer_path=cl100k_base --tokenizer_dir=" + dir, "x\n");
  EXPECT_EQ(truncated.exit_code, 2);
  EXPECT_NE(truncated.err.find("cl100k_base.tiktoken: sha256 "), std::string::npos) << truncated.err;
  EXPECT_NE(truncated.err.find("differs from the published 223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
            std::string::npos) << truncated.err;
  EXPECT_TRUE(one_line(truncated)) << truncated.err;
  // One rank changed: the digest again, through a path this time.
  std::string altered = gpt2;
  altered.replace(altered.find(" 100\n"), 5, " 50300\n");  // a rank no token has
  std::ofstream(dir + "/r50k_base.tiktoken", std::ios::binary) << altered;
  CliRun edited = kiln("tokenize --ids tokenizer_type=tiktoken tokenizer_path=" + dir + "/r50k_base.tiktoken", "x\n");
  EXPECT_EQ(edited.exit_code, 2);
  EXPECT_NE(edited.err.find("differs from the published"), std::string::npos) << edited.err;
  // A file of no known encoding, given by path.
  std::ofstream(dir + "/mine.tiktoken", std::ios::binary) << "YQ== 0\nYg== 1\n";
  CliRun unknown_file = kiln("tokenize --ids tokenizer_type=tiktoken tokenizer_path=" + dir + "/mine.tiktoken", "x\n");
  EXPECT_EQ(unknown_file.exit_code, 2);
  EXPECT_NE(unknown_file.err.find("mine.tiktoken: sha256"), std::string::npos) << unknown_file.err;
  EXPECT_NE(unknown_file.err.find("o200k_harmony"), std::string::npos) << unknown_file.err;
  // A directory without the file, and one that does not exist.
  CliRun absent = kiln("tokenize --ids" + kHarmony + " tokenizer_dir=" + dir, "x\n");
  EXPECT_EQ(absent.exit_code, 2);
  EXPECT_NE(absent.err.find(dir + "/o200k_base.tiktoken not found"), std::string::npos) << absent.err;
  EXPECT_TRUE(one_line(absent)) << absent.err;
  CliRun no_dir = kiln("tokenize --ids" + kHarmony + " tokenizer_dir=" + dir + "/nowhere", "x\n");
  EXPECT_EQ(no_dir.exit_code, 2);
  EXPECT_NE(no_dir.err.find("tokenizer directory " + dir + "/nowhere does not exist"), std::string::npos) << no_dir.err;
  EXPECT_NE(no_dir.err.find("KILN_TOKENIZER_DIR"), std::string::npos) << no_dir.err;
  // The published file by path works, named by its digest (as in tiktoken's download cache).
  std::filesystem::copy_file(kTokenizerDir + "/gpt2.tiktoken", dir + "/9b5ad71b2ce5302211f9c61530b329a4922fc6a4");
  CliRun cached = kiln("tokenize --ids tokenizer_type=tiktoken tokenizer_path=" + dir + "/9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
                       "Hello world\n");
  EXPECT_EQ(cached.exit_code, 0) << cached.err;
  EXPECT_EQ(cached.out, "15496 995\n");
  std::filesystem::remove_all(dir);
}

TEST(KilnTokenizeCli, FilesToShardsWithProgressAndAResumingReRun) {
  KILN_REQUIRE_TIKTOKEN_FILES();
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
