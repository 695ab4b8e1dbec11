// check_sentencepiece_charsmaps: a precompiled normalization map whose trie or offsets
// leave its buffer is refused naming the field, before libsentencepiece reads it; valid maps
// (and models without one) pass. Models are built here as protobuf bytes.
#include "kiln/data/sentencepiece_model_check.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::data {
namespace {

std::string varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}

std::string bytes_field(uint32_t number, const std::string& bytes) {
  return varint(number << 3 | 2) + varint(bytes.size()) + bytes;
}

// A ModelProto with one piece and normalizer_spec { name, precompiled_charsmap }.
std::string model_with_charsmap(const std::string& charsmap) {
  const std::string piece = bytes_field(1, "a");
  const std::string spec = bytes_field(1, "nmt_nfkc") + bytes_field(2, charsmap);
  return bytes_field(1, piece) + bytes_field(3, spec);
}

// uint32 trie size | units | normalized strings.
std::string charsmap(const std::vector<uint32_t>& units, const std::string& normalized) {
  std::string out(4 + 4 * units.size(), '\0');
  const uint32_t n = static_cast<uint32_t>(4 * units.size());
  std::memcpy(out.data(), &n, 4);
  std::memcpy(out.data() + 4, units.data(), 4 * units.size());
  return out + normalized;
}

TEST(SentencePieceModelCheck, AcceptsAValidMapAndAModelWithoutOne) {
  std::vector<uint32_t> units(256, 0);
  units[7] = 0x80000000u | 2;  // a leaf: offset 2 into the normalized strings
  EXPECT_TRUE(check_sentencepiece_charsmaps(model_with_charsmap(charsmap(units, std::string("ab\0cd\0", 6))), "m").ok());
  EXPECT_TRUE(check_sentencepiece_charsmaps(bytes_field(1, bytes_field(1, "a")), "m").ok());
}

TEST(SentencePieceModelCheck, RefusesMapsThatLeaveTheirBuffers) {
  const std::vector<uint32_t> units(256, 0);
  const std::string normalized("ab\0cd\0", 6);
  auto message = [](const std::string& map) {
    return check_sentencepiece_charsmaps(model_with_charsmap(map), "bad.model").message();
  };
  // A leaf whose offset is past the normalized strings.
  std::vector<uint32_t> leaf = units;
  leaf[3] = 0x80000000u | 6;
  EXPECT_EQ(message(charsmap(leaf, normalized)),
            "tokenizer_path=bad.model: not a usable SentencePiece model: normalizer_spec precompiled_charsmap points past "
            "its normalized strings");
  // A node whose children lie beyond the trie (offset 1024 from unit 5).
  std::vector<uint32_t> jump = units;
  jump[5] = 1024u << 10;
  EXPECT_NE(message(charsmap(jump, normalized)).find("has a trie transition outside the trie"), std::string::npos);
  // Normalized strings without a final NUL: strlen would run off the end.
  EXPECT_NE(message(charsmap(units, "ab")).find("without a final NUL"), std::string::npos);
  // A trie size larger than the map.
  std::string big = charsmap(units, normalized);
  const uint32_t huge = 1u << 30;
  std::memcpy(big.data(), &huge, 4);
  EXPECT_NE(message(big).find("has a trie of 1073741824 bytes"), std::string::npos);
  // Not a protobuf at all (a length past the end).
  EXPECT_NE(check_sentencepiece_charsmaps("\x1a\x7f", "bad.model").message().find("malformed protobuf"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::data
