#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "kiln/data/tokenizer.h"

namespace kiln::data {
namespace {

TEST(ByteTokenizer, RoundTripsUtf8TextAndDropsSpecialIds) {
  ByteTokenizer tok;
  std::string text = "Grüße, 世界! 🙂 tabs\tand\nnewlines  ";
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'G');
  EXPECT_EQ(ids[2], 0xC3);  // first byte of ü
  auto back = tok.decode(ids);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
  ids.insert(ids.begin(), ByteTokenizer::kBos);
  ids.push_back(ByteTokenizer::kEos);
  EXPECT_EQ(*tok.decode(ids), text);
  EXPECT_FALSE(tok.decode({300}).ok());
}

TEST(Tokenizers, FactoryBuildsBytesAndRejectsUnknownTypes) {
  auto bytes = make_tokenizer("bytes", "");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)->vocab_size(), 258);
  EXPECT_FALSE(make_tokenizer("sentencepiece", "").ok());  // needs tokenizer_path
  EXPECT_EQ(make_tokenizer("tiktoken", "").status().code(), StatusCode::kInvalidArgument);  // needs tokenizer_path
  // huggingface reads a local tokenizer.json: a Hub name is not found, not downloaded.
  EXPECT_EQ(make_tokenizer("huggingface", "openai/gpt-oss-20b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(make_tokenizer("nope", "").status().code(), StatusCode::kInvalidArgument);
}

TEST(SentencePiece, TrainsOnACorpusAndRoundTripsText) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without libsentencepiece";
  std::string dir = ::testing::TempDir() + "kiln_sp_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/corpus.txt");
    const char* words[] = {"the", "cat", "sat", "on", "mat", "a", "dog", "ran", "in", "park", "sun", "is", "warm"};
    for (int d = 0; d < 200; ++d) {
      for (int w = 0; w < 12; ++w) out << words[(d * 7 + w * 3) % 13] << (w == 11 ? "\n\n" : " ");
    }
  }
  ASSERT_TRUE(train_sentencepiece({dir + "/corpus.txt"}, dir + "/sp", 40).ok());
  auto tok = make_tokenizer("sentencepiece", dir + "/sp.model");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  std::string text = "the cat sat on the warm mat";
  std::vector<int32_t> ids = (*tok)->encode(text);
  EXPECT_LT(ids.size(), text.size());  // pieces longer than one character
  for (int32_t id : ids) EXPECT_LT(id, (*tok)->vocab_size());
  auto back = (*tok)->decode(ids);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
  auto missing = make_tokenizer("sentencepiece", dir + "/none.model");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::data
