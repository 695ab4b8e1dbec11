#include <gtest/gtest.h>

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

TEST(Tokenizers, FactoryBuildsBytesAndNamesWhatIsNotBuiltYet) {
  auto bytes = make_tokenizer("bytes", "");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)->vocab_size(), 258);
  auto sp = make_tokenizer("sentencepiece", "");
  ASSERT_FALSE(sp.ok());
  EXPECT_EQ(sp.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(make_tokenizer("nope", "").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::data
