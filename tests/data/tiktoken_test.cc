// tokenizer_type=tiktoken against the references: the PyPI package tiktoken (OpenAI's own
// BPE) reading the same published .tiktoken files, and openai-harmony (OpenAI's GPT-OSS
// renderer) for the harmony special tokens, run by tests/reference/tiktoken_ref.py in the
// project's venv (scripts/setup_venv.sh); without them the reference tests fail and say so.
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
#include "kiln/base/sha256.h"
#include "kiln/data/tokenizer/tiktoken.h"
#include "kiln/data/tokenizer/tiktoken_encodings.h"
#include "kiln/data/tokenizer/tiktoken_file.h"
#include "tests/testing/cli.h"
#include "tests/testing/tiktoken_files.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

const std::string kTokenizerDir = kiln::testing::tiktoken_test_dir();
const char* const kEncodings[] = {"o200k_harmony", "o200k_base", "cl100k_base", "p50k_base",
                                  "p50k_edit",     "r50k_base",  "gpt2"};

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
  // Multilingual prose, source code, long whitespace and digit runs, invalid UTF-8.
  t.push_back("Der Äther über Köln. Ça coûte 3,50 €. ¿Dónde está? Tiếng Việt có dấu. Türkçe ığüşöç. "
              "Ελληνικά: αβγ. Українська: їжак ґанок. 中文：我们正在训练一个语言模型。日本語：東京都。"
              "हिन्दी भाषा। ภาษาไทยไม่มีช่องว่าง. Kiswahili: habari gani? አማርኛ ፊደል. ქართული ენა.");
  t.push_back("#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;  // double\n"
              "  return v.size() > 2 ? 0 : 1;\n}\n\nfn main() { let s: &str = \"héllo\"; println!(\"{s:?}\"); }\n"
              "SELECT id, COUNT(*) FROM t WHERE name LIKE '%x%' GROUP BY id;\n<div class=\"a\">&nbsp;</div>\n");
  t.push_back(repeat("\t", 70) + repeat(" \n", 90) + repeat("\u3000", 40) + "end" + repeat("\r\n", 50));
  t.push_back(repeat("9", 1001) + " " + repeat("0", 77) + "." + repeat("12", 300) + "٣٤٥٦" + repeat("½", 20));
  t.push_back("\xff\xfe\xfd bytes \xc3 cut \xe6\x97 end\x80 \xed\xa0\x80 surrogate \xf4\x90\x80\x80 too-big "
              "\xc0\xaf overlong " + repeat("\xe2\x82", 30) + "tail\xf0\x9f\x98");
  t.push_back("Hello \xff world \xf0\x9f\x98\x80 \x80\x81\x82 '\xc3's");
  // A paragraph of English prose.
  t.push_back(
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
      "it was the season of Darkness, it was the spring of hope, it was the winter of despair.");
  return t;
}

std::string base64(const std::string& bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

// The reference's answers for all encodings on reference_texts(), computed once.
const nlohmann::json& reference() {
  static const nlohmann::json ref = [] {
    const std::string python = KILN_VENV_PYTHON;
    if (!fs::exists(python)) {
      ADD_FAILURE() << python << " is missing: run scripts/setup_venv.sh (tiktoken, openai-harmony from PyPI)";
      return nlohmann::json();
    }
    std::vector<std::string> texts_b64;
    for (const std::string& text : reference_texts()) texts_b64.push_back(base64(text));
    nlohmann::json input = {{"encodings", kEncodings}, {"texts_b64", texts_b64}};
    std::string in_path = ::testing::TempDir() + "kiln_tiktoken_ref_" + std::to_string(getpid()) + ".json";
    std::ofstream(in_path) << input.dump();
    std::string script = std::string(KILN_SOURCE_DIR) + "/tests/reference/tiktoken_ref.py";
    testing::CliRun run = testing::run_command(python, "'" + script + "' '" + kTokenizerDir + "' '" + in_path + "'");
    std::remove(in_path.c_str());
    if (run.exit_code != 0) {
      ADD_FAILURE() << "tiktoken_ref.py failed: " << run.err;
      return nlohmann::json();
    }
    return nlohmann::json::parse(run.out);
  }();
  return ref;
}

TEST(TiktokenReference, IdsEqualThePypiPackageForEveryEncoding) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  const nlohmann::json& ref = reference();
  ASSERT_FALSE(ref.is_null());
  std::vector<std::string> texts = reference_texts();
  for (const char* name : kEncodings) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ref.contains(name));
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

// Kiln's one table of encodings (pattern, special tokens, file) is tiktoken's.
TEST(TiktokenReference, TableEqualsThePypiPackage) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  const nlohmann::json& ref = reference();
  ASSERT_FALSE(ref.is_null());
  for (const char* name : kEncodings) {
    SCOPED_TRACE(name);
    const TiktokenEncoding* e = find_tiktoken_encoding(name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->pattern, ref[name]["pat_str"].get<std::string>());
    std::map<std::string, int32_t> ours(e->special_tokens.begin(), e->special_tokens.end());
    EXPECT_EQ(ours.size(), e->special_tokens.size()) << "a special token is listed twice";
    using Specials = std::map<std::string, int32_t>;
    EXPECT_EQ(ours, ref[name]["special_tokens"].get<Specials>());
  }
}

// ... and its harmony tokens are those of OpenAI's GPT-OSS renderer, where the two packages
// agree. They differ in two entries: openai-harmony lists <|reserved_201088|> (id 201088, one
// past GPT-OSS's vocabulary of 201,088 ids, so no model can emit or embed it) and lacks
// <|endofprompt|> (o200k_base's second name for 200018, which tiktoken's o200k_harmony keeps).
// Kiln follows tiktoken; the test pins exactly that difference, so any other change fails.
TEST(TiktokenReference, HarmonySpecialTokensEqualOpenaiHarmony) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  const nlohmann::json& ref = reference();
  ASSERT_FALSE(ref.is_null());
  ASSERT_TRUE(ref.contains("harmony"));
  const TiktokenEncoding* e = find_tiktoken_encoding("o200k_harmony");
  std::map<std::string, int32_t> ours(e->special_tokens.begin(), e->special_tokens.end());
  using Specials = std::map<std::string, int32_t>;
  Specials theirs = ref["harmony"]["special_tokens"].get<Specials>();
  std::map<std::string, int32_t> only_ours, only_theirs;
  for (const auto& [text, id] : ours) {
    auto it = theirs.find(text);
    if (it == theirs.end()) only_ours[text] = id;
    else EXPECT_EQ(it->second, id) << text;
  }
  for (const auto& [text, id] : theirs) {
    if (!ours.count(text)) only_theirs[text] = id;
  }
  EXPECT_EQ(only_ours, (std::map<std::string, int32_t>{{"<|endofprompt|>", 200018}}));
  EXPECT_EQ(only_theirs, (std::map<std::string, int32_t>{{"<|reserved_201088|>", 201088}}));
  EXPECT_EQ(theirs.size(), 1091u);
  const TiktokenTokenizer& t = tokenizer("o200k_harmony");
  // The renderer's stop tokens are named tokens here: <|return|>, <|end|>, <|call|>.
  for (int32_t id : ref["harmony"]["stop_tokens"].get<std::vector<int32_t>>()) {
    auto text = t.decode({id});
    ASSERT_TRUE(text.ok()) << id;
    EXPECT_EQ(t.special_id(*text), id);
    EXPECT_EQ(text->find("reserved"), std::string::npos) << *text;
  }
  // Ordinary text encodes the same in the renderer.
  std::vector<std::string> texts = reference_texts();
  for (size_t i = 0; i < texts.size(); ++i) {
    if (ref["harmony"]["ordinary"][i].is_null()) continue;  // invalid UTF-8: the renderer takes str only
    EXPECT_EQ(t.encode(texts[i]), ref["harmony"]["ordinary"][i].get<std::vector<int32_t>>()) << i;
  }
}

TEST(Tiktoken, PublishedFilesMatchTheTable) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  for (const TiktokenEncoding& e : tiktoken_encodings()) {
    SCOPED_TRACE(std::string(e.name));
    std::string text = testing::read_text_file(kTokenizerDir + "/" + std::string(e.file));
    ASSERT_FALSE(text.empty()) << kTokenizerDir << "/" << e.file << " is missing";
    EXPECT_EQ(sha256_hex(text), e.sha256);
    EXPECT_EQ(find_tiktoken_encoding_by_sha256(e.sha256)->file, e.name == "gpt2" ? "r50k_base.tiktoken" : e.file);
  }
  EXPECT_EQ(find_tiktoken_encoding_by_sha256(sha256_hex("abc")), nullptr);
  // FIPS 180-2's example.
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TiktokenFile, MalformedLinesNameTheFileAndLine) {
  auto ok = parse_tiktoken_ranks("YQ== 0\nYg== 1\r\n\nYWI= 7\n", "f.tiktoken");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[2], (std::pair<std::string, int32_t>{"ab", 7}));
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"YQ== 0\nYg==\n", "f.tiktoken:2: expected \"BASE64TOKEN RANK\" (one token and its rank per line), got \"Yg==\""},
      {"YQ== 0\nYg== x1\n", "f.tiktoken:2: expected \"BASE64TOKEN RANK\" (one token and its rank per line); the rank \"x1\""},
      {"YQ== -1\n", "f.tiktoken:1: expected"},
      {"YQ== 99999999999\n", "not an integer in [0, 2^31-1)"},
      {"Y*Q= 0\n", "f.tiktoken:1: expected \"BASE64TOKEN RANK\" (one token and its rank per line); the token \"Y*Q=\" is not base64"},
      {"YQ== 0\nYg== 0\n", "f.tiktoken:2: rank 0 appears twice"},
      {"YQ== 0\nYQ== 1\n", "f.tiktoken:2: token \"YQ==\" appears twice"},
      {"YQ=a 0\n", "is not base64"},
      {"", "f.tiktoken: holds no tokens"},
      {" 0\n", "f.tiktoken:1: expected"},
  };
  for (const Case& c : cases) {
    auto r = parse_tiktoken_ranks(c.text, "f.tiktoken");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

TEST(Tiktoken, HarmonyHasGptOssVocabAndSpecialIds) {
  KILN_REQUIRE_TIKTOKEN_FILES();
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
  KILN_REQUIRE_TIKTOKEN_FILES();
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
  KILN_REQUIRE_TIKTOKEN_FILES();
  const TiktokenTokenizer& t = tokenizer("cl100k_base");
  std::string text = "ok \xff\xfe bytes \xc3 cut \xe6\x97 end\x80";
  std::vector<int32_t> ids = t.encode(text);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(*t.decode(ids), text);
}

TEST(Tiktoken, BadTokenizerPathIsOneLineNamingTheKey) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  auto unknown = make_tokenizer("tiktoken", "o300k");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("tokenizer_path=o300k"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("o200k_harmony"), std::string::npos);
  EXPECT_EQ(make_tokenizer("tiktoken", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_tokenizer("tiktoken", "/nonexistent/enc.json").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(make_tokenizer("tiktoken", "/nonexistent/o200k_base.tiktoken").status().code(), StatusCode::kNotFound);
  auto no_dir = make_tokenizer("tiktoken", "o200k_base", "/nonexistent/dir");
  EXPECT_EQ(no_dir.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_dir.status().message().find("/nonexistent/dir does not exist"), std::string::npos);
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
