// Token shards: the written file reads back exactly, and every kind of bad file is one
// error line that names the file and the problem.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/data/corpus.h"
#include "kiln/data/shard.h"

namespace kiln::data {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kiln_shard_" + std::to_string(getpid()) + "_" + name;
}

std::string write_shard(const std::string& name, uint64_t vocab, const std::vector<std::vector<int32_t>>& docs) {
  ShardWriter w({vocab, 1, 2});
  for (const auto& d : docs) EXPECT_TRUE(w.add_document(d).ok());
  std::string path = temp_path(name);
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

TEST(Shard, RoundTripsDocumentsWithUint16AndUint32Tokens) {
  std::vector<std::vector<int32_t>> docs = {{5, 6, 7}, {}, {9}, {3, 3, 3, 3}};
  for (uint64_t vocab : {100ull, 70000ull}) {
    std::vector<std::vector<int32_t>> d = docs;
    if (vocab > 65536) d[2] = {69999};
    std::string path = write_shard("rt_" + std::to_string(vocab), vocab, d);
    EXPECT_EQ(std::filesystem::file_size(path), 64 + 8 * 5 + (vocab > 65536 ? 4 : 2) * 8);
    auto shard = Shard::open(path);
    ASSERT_TRUE(shard.ok()) << shard.status().message();
    EXPECT_EQ((*shard)->num_documents(), 4);
    EXPECT_EQ((*shard)->num_tokens(), 8);
    EXPECT_EQ((*shard)->info().vocab_size, vocab);
    EXPECT_EQ((*shard)->info().bos_id, 1u);
    EXPECT_EQ((*shard)->info().eos_id, 2u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ((*shard)->document(i), d[i]);
  }
}

TEST(Shard, WriterRejectsIdsOutsideTheVocabulary) {
  ShardWriter w({10, kNoToken, kNoToken});
  std::vector<int32_t> bad = {1, 10};
  Status s = w.add_document(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
}

void expect_error(const std::string& path, StatusCode code, const std::string& what) {
  auto shard = Shard::open(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), code);
  const std::string& m = shard.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find(what), std::string::npos) << m;
}

TEST(Shard, MissingFileIsNotFoundNamingTheFile) {
  expect_error(temp_path("does_not_exist.bin"), StatusCode::kNotFound, "not found");
}

TEST(Shard, WrongMagicIsReported) {
  std::string path = write_shard("magic", 100, {{1, 2, 3}});
  std::string bytes = read_bytes(path);
  bytes[0] = 'X';
  write_bytes(path, bytes);
  expect_error(path, StatusCode::kDataLoss, "wrong magic");
}

TEST(Shard, TruncatedBodyAndHeaderAreReported) {
  std::string path = write_shard("trunc", 100, {{1, 2, 3}, {4, 5}});
  std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 3));
  expect_error(path, StatusCode::kDataLoss, "truncated");
  write_bytes(path, bytes.substr(0, 20));
  expect_error(path, StatusCode::kDataLoss, "truncated");
}

TEST(Shard, TokenIdAtOrAboveTheVocabularyIsReported) {
  std::string path = write_shard("vocab", 100, {{1, 99, 3}});
  std::string bytes = read_bytes(path);
  // Lower vocab_size in the header to 50: token 99 is now out of range.
  uint64_t vocab = 50;
  bytes.replace(16, 8, reinterpret_cast<const char*>(&vocab), 8);
  write_bytes(path, bytes);
  expect_error(path, StatusCode::kDataLoss, "id 99, not below the shard's vocab_size 50");
}

TEST(Corpus, OpenShardsReportsAMissingPathAndAnEmptyDirectory) {
  auto missing = open_shards(temp_path("no_such_dir"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("not found"), std::string::npos);
  std::string dir = temp_path("empty_dir");
  std::filesystem::create_directories(dir);
  auto empty = open_shards(dir);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty corpus"), std::string::npos) << empty.status().message();
}

TEST(Corpus, PlainTextSplitsOnBlankAndPercentLinesAndJsonlReadsText) {
  std::string plain = temp_path("plain.txt");
  write_bytes(plain, "first para\nline two\n\n\nsecond\n%\nthird\n");
  auto docs = read_documents(plain);
  ASSERT_TRUE(docs.ok());
  EXPECT_EQ(*docs, (std::vector<std::string>{"first para\nline two", "second", "third"}));
  std::string jsonl = temp_path("docs.jsonl");
  write_bytes(jsonl, "{\"text\": \"a\\nb\", \"id\": 1}\n\n{\"text\": \"c\"}\n");
  auto jdocs = read_documents(jsonl);
  ASSERT_TRUE(jdocs.ok());
  EXPECT_EQ(*jdocs, (std::vector<std::string>{"a\nb", "c"}));
  write_bytes(jsonl, "{\"text\": \"a\"}\n{\"body\": 2}\n");
  auto bad = read_documents(jsonl);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(jsonl + ":2:"), std::string::npos) << bad.status().message();
}

TEST(Corpus, TokenizeWritesShardsAndAManifestWhoseChecksumsAreVerified) {
  std::string in = temp_path("corpus.txt");
  write_bytes(in, "hello world\n\nsecond document\n\nthird\n");
  std::string out = temp_path("shards");
  std::filesystem::remove_all(out);
  ByteTokenizer tok;
  auto report = tokenize_files({in}, tok, {out, /*shard_tokens=*/12});
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->documents, 3);
  EXPECT_EQ(report->tokens, 11 + 15 + 5);
  EXPECT_EQ(report->shards, 2);
  auto shards = open_shards(out);
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  ASSERT_EQ(shards->size(), 2u);
  EXPECT_EQ((*shards)[0]->document(0), tok.encode("hello world"));
  // A changed shard no longer matches the manifest.
  std::string shard0 = out + "/shard_00000.bin";
  std::string bytes = read_bytes(shard0);
  bytes[bytes.size() - 1] = 'z';
  write_bytes(shard0, bytes);
  auto changed = open_shards(out);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("checksum mismatch"), std::string::npos);
}

}  // namespace
}  // namespace kiln::data
