// tokenize_corpus (what `kiln tokenize FILE...` runs): the same shards whatever the thread
// count, the documents corpus.h's rules give, resuming from finished shards, JSONL fields,
// token width by vocabulary, and one-line errors naming the file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "kiln/data/corpus.h"
#include "kiln/data/shard.h"
#include "kiln/data/tokenizer/tiktoken.h"
#include "kiln/data/tokenizer/tokenize_corpus.h"
#include "tests/testing/tiktoken_files.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

const std::string kTokenizerDir = kiln::testing::tiktoken_test_dir();

std::string temp(const std::string& name) {
  return ::testing::TempDir() + "kiln_tokcorpus_" + std::to_string(getpid()) + "_" + name;
}
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A plain file of many paragraphs (blank-line, "%" and CRLF separators) and a JSONL file.
std::pair<std::string, std::string> make_inputs() {
  std::string plain = temp("plain.txt"), jsonl = temp("docs.jsonl");
  std::string p, j;
  for (int i = 0; i < 60; ++i) {
    p += "paragraph " + std::to_string(i) + " line one\nline two of " + std::to_string(i) + "\n";
    p += i % 3 == 0 ? "%\n" : i % 3 == 1 ? "\n\n" : "  \r\n";
    j += "{\"text\": \"json doc " + std::to_string(i) + " \\u00e9\", \"id\": " + std::to_string(i) + "}\n";
    if (i % 7 == 0) j += "\n";
  }
  write_bytes(plain, p);
  write_bytes(jsonl, j);
  return {plain, jsonl};
}

TokenizeCorpusOptions opts(const std::string& dir, int threads, int64_t chunk_bytes) {
  TokenizeCorpusOptions o;
  o.output_dir = dir;
  o.threads = threads;
  o.chunk_bytes = chunk_bytes;
  o.progress = Progress::Mode::kOff;
  return o;
}

std::vector<std::vector<int32_t>> all_documents(const std::string& dir) {
  auto shards = open_shards(dir);
  EXPECT_TRUE(shards.ok()) << shards.status().message();
  std::vector<std::vector<int32_t>> docs;
  if (!shards.ok()) return docs;
  for (const auto& s : *shards)
    for (int64_t i = 0; i < s->num_documents(); ++i) docs.push_back(s->document(i));
  return docs;
}

TEST(TokenizeCorpus, ThreadsAndChunksGiveTheSameShardsAndCorpusDocuments) {
  auto [plain, jsonl] = make_inputs();
  ByteTokenizer tok;
  std::string one = temp("one"), four = temp("four");
  fs::remove_all(one);
  fs::remove_all(four);
  auto a = tokenize_corpus({plain, jsonl}, tok, opts(one, 1, 300));
  auto b = tokenize_corpus({plain, jsonl}, tok, opts(four, 4, 300));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_GT(a->shards, 4);  // small chunks: several units per file
  EXPECT_EQ(a->shards, b->shards);
  EXPECT_EQ(read_bytes(one + "/manifest.json"), read_bytes(four + "/manifest.json"));
  for (const auto& e : fs::directory_iterator(one)) {
    EXPECT_EQ(read_bytes(e.path().string()), read_bytes(four + "/" + e.path().filename().string()));
  }
  // The documents are exactly corpus.h's (read_documents) for each file, in order.
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& f : {plain, jsonl}) {
    Result<std::vector<std::string>> docs = read_documents(f);
    ASSERT_TRUE(docs.ok()) << docs.status().message();
    for (const std::string& d : *docs) expected.push_back(tok.encode(d));
  }
  EXPECT_EQ(all_documents(one), expected);
  EXPECT_EQ(a->documents, 120);
  // One chunk per file gives the same documents in fewer shards.
  std::string big = temp("big");
  fs::remove_all(big);
  auto c = tokenize_corpus({plain, jsonl}, tok, opts(big, 2, 1 << 20));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->shards, 2);
  EXPECT_EQ(all_documents(big), expected);
}

TEST(TokenizeCorpus, ReRunReusesFinishedShardsAndRedoesOnlyMissingOrChangedOnes) {
  auto [plain, jsonl] = make_inputs();
  ByteTokenizer tok;
  std::string dir = temp("resume");
  fs::remove_all(dir);
  auto first = tokenize_corpus({plain, jsonl}, tok, opts(dir, 2, 300));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->reused_shards, 0);
  std::string manifest = read_bytes(dir + "/manifest.json");
  auto again = tokenize_corpus({plain, jsonl}, tok, opts(dir, 2, 300));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reused_shards, first->shards);
  EXPECT_TRUE(again->restart_reason.empty());
  // An interrupted job: the final manifest is missing, one shard was never written and
  // another is corrupt. The partial manifest of the first run lists them all.
  fs::rename(dir + "/manifest.json", dir + "/manifest.partial.json");
  fs::remove(dir + "/shard_00001.bin");
  std::string s2 = read_bytes(dir + "/shard_00002.bin");
  s2.back() ^= 1;
  write_bytes(dir + "/shard_00002.bin", s2);
  auto resumed = tokenize_corpus({plain, jsonl}, tok, opts(dir, 2, 300));
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->reused_shards, first->shards - 2);
  EXPECT_EQ(read_bytes(dir + "/manifest.json"), manifest);
  EXPECT_FALSE(fs::exists(dir + "/manifest.partial.json"));
  // Other settings: everything is tokenized again, and stale shards go away.
  auto rechunked = tokenize_corpus({plain, jsonl}, tok, opts(dir, 2, 1 << 20));
  ASSERT_TRUE(rechunked.ok());
  EXPECT_EQ(rechunked->reused_shards, 0);
  EXPECT_NE(rechunked->restart_reason.find("another tokenizer, settings or input files"), std::string::npos);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);  // 2 shards + manifest
}

TEST(TokenizeCorpus, JsonlTextFieldAndErrorsNameTheFileAndLine) {
  ByteTokenizer tok;
  std::string jsonl = temp("content.jsonl"), dir = temp("field");
  write_bytes(jsonl, "{\"content\": \"abc\"}\n{\"content\": \"de\"}\n");
  TokenizeCorpusOptions o = opts(dir, 1, 1 << 20);
  o.text_field = "content";
  auto ok = tokenize_corpus({jsonl}, tok, o);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->tokens, 5);
  o.text_field = "text";
  auto bad = tokenize_corpus({jsonl}, tok, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(jsonl + ":1: no \"text\" string field"), std::string::npos)
      << bad.status().message();
  auto missing = tokenize_corpus({temp("nope.txt")}, tok, o);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.txt: input file not found"), std::string::npos);
  std::string blank = temp("blank.txt");
  write_bytes(blank, "\n\n%\n");
  auto empty = tokenize_corpus({blank}, tok, opts(temp("empty"), 1, 1 << 20));
  EXPECT_NE(empty.status().message().find("empty corpus"), std::string::npos);
}

TEST(TokenizeCorpus, TokenWidthFollowsTheVocabulary) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  std::string in = temp("width.txt");
  write_bytes(in, "Hello tokenizer world, <|endoftext|> stays text.\n\nSecond document.\n");
  auto width = [](const std::string& dir) { return static_cast<int>(read_bytes(dir + "/shard_00000.bin")[12]); };
  ByteTokenizer bytes;
  ASSERT_TRUE(tokenize_corpus({in}, bytes, opts(temp("w_bytes"), 1, 1 << 20)).ok());
  EXPECT_EQ(width(temp("w_bytes")), 2);
  auto harmony = TiktokenTokenizer::load("o200k_harmony");
  ASSERT_TRUE(harmony.ok()) << harmony.status().message();
  std::string dir = temp("w_harmony");
  auto r = tokenize_corpus({in}, **harmony, opts(dir, 1, 1 << 20));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(width(dir), 4);  // vocab 201,088 > 65,536
  auto shards = open_shards(dir);
  ASSERT_TRUE(shards.ok());
  EXPECT_EQ((*shards)[0]->info().vocab_size, 201088u);
  EXPECT_EQ((*shards)[0]->info().eos_id, 199999u);
  EXPECT_EQ(*(*harmony)->decode((*shards)[0]->document(0)), "Hello tokenizer world, <|endoftext|> stays text.");
  nlohmann::json m = nlohmann::json::parse(read_bytes(dir + "/manifest.json"));
  EXPECT_EQ(m["tokenizer"]["type"], "tiktoken:o200k_harmony");
  EXPECT_EQ(m["tokenizer"]["dtype"], "uint32");
  EXPECT_EQ(m["complete"], true);
}

}  // namespace
}  // namespace kiln::data
