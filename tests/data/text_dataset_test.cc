// dataset_type=text: which files a dataset_path names (links and binary files in a
// directory skipped), tokenizing once into the cache and reusing it, a new cache entry when
// a file changes, and one-line errors for missing paths and empty corpora.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "kiln/data/corpus.h"
#include "kiln/data/pipeline.h"
#include "kiln/data/text_dataset.h"
#include "tests/testing/temp_path.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path p = ::kiln::testing::temp_path("kiln_text_dataset_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

TEST(TextDataset, DirectoriesGiveTheirTextFilesInNameOrder) {
  fs::path dir = fresh_dir("list");
  write(dir / "b", "second file\n%\nmore\n");
  write(dir / "a", "first file\n");
  write(dir / "a.dat", std::string("\0\0\x01\x02", 4));  // a binary index, as fortune ships
  fs::create_symlink(dir / "a", dir / "a.u8");
  fs::path extra = dir.parent_path() / (dir.filename().string() + "_extra.txt");
  write(extra, "extra\n");
  auto files = list_text_files(dir.string() + ", " + extra.string());
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(files->files, (std::vector<std::string>{(dir / "a").string(), (dir / "b").string(), extra.string()}));
  EXPECT_EQ(files->skipped, 2);
}

TEST(TextDataset, MissingPathsAndEmptyCorporaAreOneLineErrors) {
  Result<TextFiles> empty = list_text_files("");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("dataset_path is empty"), std::string::npos);
  fs::path dir = fresh_dir("errors");
  Result<TextFiles> missing = list_text_files((dir / "nope.txt").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.txt: text file or directory not found"), std::string::npos)
      << missing.status().message();
  fs::create_directories(dir / "void");
  Result<TextFiles> none = list_text_files((dir / "void").string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("empty corpus"), std::string::npos) << none.status().message();
  // A text file with no documents: tokenizing it says so.
  write(dir / "blank.txt", "\n\n%\n\n");
  ByteTokenizer bytes;
  Result<CachedCorpus> blank = tokenize_cached({(dir / "blank.txt").string()}, bytes, "bytes", (dir / "cache").string());
  ASSERT_FALSE(blank.ok());
  EXPECT_NE(blank.status().message().find("empty corpus"), std::string::npos) << blank.status().message();
  EXPECT_FALSE(fs::exists(dir / "cache") && !fs::is_empty(dir / "cache"));  // no half-written cache left
}

TEST(TextDataset, TokenizesOnceThenReusesTheCacheUntilAFileChanges) {
  fs::path dir = fresh_dir("cache");
  write(dir / "t.txt", "the cat sat\n\na dog ran\n");
  ByteTokenizer bytes;
  const std::string cache = (dir / "cache").string();
  auto first = tokenize_cached({(dir / "t.txt").string()}, bytes, "bytes", cache);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_FALSE(first->reused);
  EXPECT_EQ(first->documents, 2);
  EXPECT_EQ(first->tokens, 20);
  auto again = tokenize_cached({(dir / "t.txt").string()}, bytes, "bytes", cache);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->reused);
  EXPECT_EQ(again->dir, first->dir);
  auto shards = open_shards(again->dir);  // the cache is an ordinary shard directory
  ASSERT_TRUE(shards.ok()) << shards.status().message();
  EXPECT_EQ((*shards)[0]->document(1), bytes.encode("a dog ran"));

  write(dir / "t.txt", "the cat sat\n\na dog ran far\n");
  auto changed = tokenize_cached({(dir / "t.txt").string()}, bytes, "bytes", cache);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(changed->reused);
  EXPECT_NE(changed->dir, first->dir);
  auto other_tokenizer = tokenize_cached({(dir / "t.txt").string()}, bytes, "bytes:v2", cache);
  ASSERT_TRUE(other_tokenizer.ok());
  EXPECT_NE(other_tokenizer->dir, changed->dir);
}

}  // namespace
}  // namespace kiln::data
