// tokenizer_type=tiktoken against the reference: the npm package tiktoken (OpenAI's Rust
// BPE compiled to wasm), run with node by tests/reference/tiktoken_ref.js on the same texts.
// Both come from scripts/setup.sh; without them the reference test fails and says so.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/data/tokenizer.h"
#include "kiln/data/tokenizer/bpe.h"
#include "kiln/data/tokenizer/tiktoken.h"
#include "tests/testing/cli.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

const char* const kEncodings[] = {"o200k_harmony", "o200k_base", "cl100k_base", "gpt2"};

// Loading o200k parses 200k base64 tokens; share one tokenizer per encoding and options.
const TiktokenTokenizer& tokenizer(const std::string& name, bool all_special = false) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<TiktokenTokenizer>> cache;
  auto& slot = cache[{name, all_special}];
  if (!slot) {
    TiktokenTokenizer::Options options;
    if (all_special) options.allowed_special = {"all"};
    auto t = TiktokenTokenizer::load(name, options);
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (!t.ok()) std::abort();
    slot = std::move(t).value();
  }
  return *slot;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// The varied text set: scripts, digits, whitespace runs, contractions, emoji, code, special
// tokens, empty text, very long words (which take the heap merge path) and seeded random
// mixtures.
std::vector<std::string> reference_texts() {
  std::vector<std::string> t = {
      "",
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog. It's 5 o'clock; isn't it?",
      "I'm can't won't they're we've he'll she'd IT'S DON'T We'Ve O'Neil'S",
      "1234567890 3.14159 1,000,000 -42 +7e-10 0x1F ٣٤٥ ①② ½ 2024-11-29T21:00Z",
      "a  b   c\t\t\td\n\n\ne   \n  f    ",
      "line one\r\nline two\r\n\r\n  indented\n\ttabbed   \n",
      "我爱自然语言处理。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
      "🙂👍🏽👨‍👩‍👧‍👦 🇩🇪 ❤️ emoji:😀😃😄 ✨done✨",
      "e\u0301 café naïve Ελληνικά Русский текст עברית العربية हिन्दी ไทย",
      "HTTPServerError camelCaseWord XMLHttpRequest snake_case_name kebab-case-name",
      "def f(x):\n    return x**2  # square\n\tif (a<b && c>d) { printf(\"%d\\n\", a); }",
      "https://example.com/path/to/file.html?q=1&r=two#frag mailto:someone@example.org",
      "\u00a0nbsp\u2003em\u3000ideographic\u200bzero-width\u2028line-sep\u00adsoft-hyphen",
      "!!! ??? ... --- /// \\\\ ''' \"\"\" ((( ))) <<< >>> |||",
      "<|endoftext|>Hello<|startoftext|> <|start|>assistant<|channel|>final<|message|>Hi!<|end|>",
      "<|reserved_200018|> <|endofprompt|> <|fim_prefix|>x<|fim_suffix|> <|return|><|call|> <|not_special|> <|",
      "Text with a trailing special token<|endoftext|>",
      repeat("a", 5000),
      repeat("ab", 3000),
      repeat("1234567890", 200),
      repeat(" ", 1000) + "x" + repeat("\n", 300),
      repeat("😀", 300),
      repeat("Supercalifragilisticexpialidocious", 60),
  };
  // A long pseudo-random "word" of letters and a long base64-like blob.
  std::mt19937 rng(1234);
  std::string word, blob;
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  const std::string b64 = letters + "0123456789+/";
  for (int i = 0; i < 3000; ++i) word += letters[rng() % letters.size()];
  for (int i = 0; i < 3000; ++i) blob += b64[rng() % b64.size()];
  t.push_back(word);
  t.push_back(blob);
  // Seeded random mixtures of the character classes the split patterns distinguish
  // (letters of each case, marks, digits, spaces of several kinds, newlines, apostrophes,
  // punctuation, CJK, emoji), where pattern differences would show.
  const std::vector<std::string> pool = {
      "a", "Z", "e", "Q", "'", "'s", "'LL", "'d", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "7", "42", "1234",
      "٣", "½", ".", ",", "!", "?", "/", "-", "_", "(", ")", "\"", "<|", "|>", "é", "ß", "Ω", "ж", "Ж",
      "\u0301", "\u00a0", "\u2003", "\u3000", "中", "文", "の", "カ", "한", "😀", "👍🏽", "\u200d", "ǅ", "ʰ"};
  for (int i = 0; i < 40; ++i) {
    std::string mix;
    int n = 5 + static_cast<int>(rng() % 120);
    for (int k = 0; k < n; ++k) mix += pool[rng() % pool.size()];
    t.push_back(mix);
  }
  // A paragraph of English prose.
  t.push_back(
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
      "it was the season of Darkness, it was the spring of hope, it was the winter of despair.");
  return t;
}

std::string package_dir() {
  return (fs::path(tiktoken_encoders_dir()).parent_path()).string();
}

TEST(TiktokenReference, IdsEqualTheNpmPackageForAllFourEncodings) {
  std::string pkg = package_dir();
  ASSERT_TRUE(fs::exists(pkg + "/lite/tiktoken.cjs"))
      << pkg << " has no npm package tiktoken: run scripts/setup.sh (npm install tiktoken@1.0.22)";
  ASSERT_EQ(std::system("node --version > /dev/null 2>&1"), 0) << "node is missing: run scripts/setup.sh";
  std::vector<std::string> texts = reference_texts();
  nlohmann::json input = {{"encodings", kEncodings}, {"texts", texts}};
  std::string in_path = ::testing::TempDir() + "kiln_tiktoken_ref_" + std::to_string(getpid()) + ".json";
  std::ofstream(in_path) << input.dump();
  std::string script = std::string(KILN_SOURCE_DIR) + "/tests/reference/tiktoken_ref.js";
  testing::CliRun run = testing::run_command("node", "'" + script + "' '" + pkg + "' '" + in_path + "'");
  std::remove(in_path.c_str());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json ref = nlohmann::json::parse(run.out);
  for (const char* name : kEncodings) {
    SCOPED_TRACE(name);
    const TiktokenTokenizer& plain = tokenizer(name);
    const TiktokenTokenizer& special = tokenizer(name, /*all_special=*/true);
    EXPECT_EQ(plain.vocab_size(), ref[name]["n_vocab"].get<int64_t>());
    for (size_t i = 0; i < texts.size(); ++i) {
      SCOPED_TRACE("text " + std::to_string(i) + ": " + texts[i].substr(0, 60));
      std::vector<int32_t> ordinary = plain.encode(texts[i]);
      EXPECT_EQ(ordinary, ref[name]["ordinary"][i].get<std::vector<int32_t>>());
      EXPECT_EQ(special.encode(texts[i]), ref[name]["all_special"][i].get<std::vector<int32_t>>());
      auto back = plain.decode(ordinary);
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(*back, texts[i]);
    }
  }
}

TEST(Tiktoken, HarmonyHasGptOssVocabAndSpecialIds) {
  const TiktokenTokenizer& t = tokenizer("o200k_harmony");
  EXPECT_EQ(t.name(), "tiktoken:o200k_harmony");
  EXPECT_EQ(t.vocab_size(), 201088);
  EXPECT_EQ(t.bos_id(), 199998);
  EXPECT_EQ(t.eos_id(), 199999);
  EXPECT_EQ(t.special_id("<|message|>"), 200008);
  EXPECT_EQ(*t.decode({200006, 200007}), "<|start|><|end|>");
  EXPECT_EQ(*t.decode({200018}), "<|endofprompt|>");  // also named <|reserved_200018|>
  EXPECT_EQ(*t.decode({201087}), "<|reserved_201087|>");
  EXPECT_FALSE(t.decode({201088}).ok());
  EXPECT_FALSE(t.decode({-1}).ok());
  // o200k_base has no token 200000 (a hole between its specials).
  const TiktokenTokenizer& base = tokenizer("o200k_base");
  EXPECT_EQ(base.vocab_size(), 200019);
  EXPECT_EQ(base.bos_id(), -1);
  EXPECT_EQ(base.eos_id(), 199999);
  EXPECT_FALSE(base.decode({200000}).ok());
}

TEST(Tiktoken, OnlyAllowedSpecialTokensAreRecognised) {
  auto some = TiktokenTokenizer::load("o200k_harmony", {{"<|end|>"}});
  ASSERT_TRUE(some.ok()) << some.status().message();
  std::vector<int32_t> ids = (*some)->encode("<|start|>x<|end|>");
  EXPECT_EQ(ids.back(), 200007);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 200006), 0);  // <|start|> stays text
  EXPECT_EQ(*(*some)->decode(ids), "<|start|>x<|end|>");
  auto bad = TiktokenTokenizer::load("gpt2", {{"<|start|>"}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("<|start|>"), std::string::npos);
}

TEST(Tiktoken, InvalidUtf8RoundTripsByteForByte) {
  const TiktokenTokenizer& t = tokenizer("cl100k_base");
  std::string text = "ok \xff\xfe bytes \xc3 cut \xe6\x97 end\x80";
  std::vector<int32_t> ids = t.encode(text);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(*t.decode(ids), text);
}

TEST(Tiktoken, BadTokenizerPathIsOneLineNamingTheKey) {
  auto unknown = make_tokenizer("tiktoken", "o300k");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("tokenizer_path=o300k"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("o200k_harmony"), std::string::npos);
  EXPECT_EQ(make_tokenizer("tiktoken", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_tokenizer("tiktoken", "/nonexistent/enc.json").status().code(), StatusCode::kNotFound);
  std::string bad = ::testing::TempDir() + "kiln_bad_encoder_" + std::to_string(getpid()) + ".json";
  std::ofstream(bad) << "{\"pat_str\": \"(\", \"bpe_ranks\": \"! 0 YQ==\"}";
  auto broken = make_tokenizer("tiktoken", bad);
  EXPECT_EQ(broken.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("does not compile"), std::string::npos) << broken.status().message();
  std::ofstream(bad) << "[1, 2]";
  EXPECT_NE(make_tokenizer("tiktoken", bad).status().message().find("not a tiktoken encoder file"), std::string::npos);
  std::remove(bad.c_str());
}

TEST(BytePairMerge, HeapAndLinearMergesAgreeOnLongPieces) {
  // A small vocabulary: all bytes, then merges of a/b/c pairs and triples in a seeded order.
  bpe::RankTable ranks;
  uint32_t rank = 0;
  for (int b = 0; b < 256; ++b) ranks.insert(std::string(1, static_cast<char>(b)), rank++);
  std::mt19937 rng(7);
  std::vector<std::string> merges;
  for (char x : std::string("abc"))
    for (char y : std::string("abc")) merges.push_back({x, y});
  for (char x : std::string("abc"))
    for (char y : std::string("abc"))
      for (char z : std::string("abc")) merges.push_back({x, y, z});
  merges.push_back("abab");
  merges.push_back("cccc");
  std::shuffle(merges.begin(), merges.end(), rng);
  for (const std::string& m : merges) ranks.insert(m, rank++);
  for (int trial = 0; trial < 50; ++trial) {
    std::string piece;
    size_t n = 2 + rng() % 400;
    for (size_t i = 0; i < n; ++i) piece += "abc"[rng() % (trial % 2 ? 2 : 3)];
    std::vector<int32_t> linear, heap;
    bpe::merge_linear(piece, ranks, linear);
    bpe::merge_heap(piece, ranks, heap);
    EXPECT_EQ(linear, heap) << piece;
    EXPECT_LT(linear.size(), piece.size());
  }
}

}  // namespace
}  // namespace kiln::data
