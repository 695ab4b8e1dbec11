// tokenizer_type=huggingface against the reference, the PyPI package `tokenizers`, run by
// tests/reference/hf_tokenizer_ref.py in the project's venv (scripts/setup_venv.sh). No
// tokenizer.json is committed or downloaded: the script builds them (GPT-OSS's o200k_harmony,
// cl100k_base, a Llama-3-style and two more variants) from OpenAI's published .tiktoken files
// in KILN_TEST_TOKENIZER_DIR, the way transformers' tiktoken converter does, into a fresh
// temporary directory, once per test binary run. Without the venv or the files the reference
// test fails and says what to run. The other tests build small tokenizer.json files here.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "kiln/data/tokenizer.h"
#include "kiln/data/tokenizer/hf_bpe.h"
#include "kiln/data/tokenizer/hf_pretokenizer.h"
#include "kiln/data/tokenizer/hf_regex.h"
#include "kiln/data/tokenizer/hf_tokenizer.h"
#include "kiln/data/tokenizer/nfc.h"
#include "kiln/data/tokenizer/tiktoken_encodings.h"
#include "tests/testing/cli.h"
#include "tests/testing/tiktoken_files.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kTokenizerDir = kiln::testing::tiktoken_test_dir();
const char* const kVariants[] = {"o200k_harmony", "cl100k_base", "llama3_style", "permuted", "gpt2_style"};

// Split patterns of real tokenizer.json files (and tiktoken's, as converted files carry them),
// plus the Oniguruma constructs hf_regex.h rewrites, checked piece by piece against
// `tokenizers`' regex engine.
std::vector<std::string> split_patterns() {
  std::vector<std::string> p = {
      hf::kGpt2Pattern,
      // Llama 3.
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      // Qwen2/3.
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      // DeepSeek V3's three.
      R"(\p{N}{1,3})",
      "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
      R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      // Oniguruma-only readings: interval repeats, \h, line anchors, Ruby's (?m), \w, \s, \u.
      R"(\h{2}+|z$|^ +|(?m:<.>)|½\w+|\W{2,}|a{,2}|\u00e9+|[\h\s]{3}+|\S{2,3}+)",
      R"(\bw\w*\b|\B[oe]+\B|\s+$|^\S|\w)",
  };
  for (const char* name : {"gpt2", "p50k_base", "cl100k_base", "o200k_base"}) {
    p.emplace_back(find_tiktoken_encoding(name)->pattern);
  }
  return p;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// The varied text set: scripts, NFC-sensitive text, digits, whitespace runs, contractions,
// emoji, code, special-token text and the added tokens' flags, very long runs, seeded random
// mixtures and invalid UTF-8.
std::vector<std::string> reference_texts() {
  std::vector<std::string> t = {
      "",
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog. It's 5 o'clock; isn't it?",
      "I'm can't won't they're we've he'll she'd IT'S DON'T We'Ve O'Neil'S i'M",
      "1234567890 3.14159 1,000,000 -42 +7e-10 0x1F ٣٤٥ ①② ½ 2024-11-29T21:00Z",
      "a  b   c\t\t\td\n\n\ne   \n  f    ",
      "line one\r\nline two\r\n\r\n  indented\n\ttabbed   \n\r\r\n \r\n",
      "我爱自然语言处理。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
      "العربية لغة جميلة، ١٢٣. עברית. हिन्दी भाषा में पाठ। ภาษาไทยไม่มีช่องว่าง Ελληνικά Русский",
      "🙂👍🏽👨‍👩‍👧‍👦 🇩🇪 ❤️ emoji:😀😃😄 ✨done✨ 🏳️‍🌈 👩🏿‍💻",
      "e\u0301 cafe\u0301 café na\u0308ive \u212b \u1100\u1161\u11a8 \uac01 A\u030a\u0323 \u0ddd",
      "HTTPServerError camelCaseWord XMLHttpRequest snake_case_name kebab-case-name",
      "def f(x):\n    return x**2  # square\n\tif (a<b && c>d) { printf(\"%d\\n\", a); }",
      "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n"
      "SELECT id, COUNT(*) FROM t WHERE name LIKE '%x%' GROUP BY id;\n<div class=\"a\">&nbsp;</div>\n",
      "https://example.com/path/to/file.html?q=1&r=two#frag mailto:someone@example.org",
      "\u00a0nbsp\u2003em\u3000ideographic\u200bzero-width\u2028line-sep\u0085next-line\u00adsoft-hyphen",
      "!!! ??? ... --- /// \\\\ ''' \"\"\" ((( ))) <<< >>> ||| || a||b",
      "<|endoftext|>Hello<|startoftext|> <|start|>assistant<|channel|>final<|message|>Hi!<|end|>",
      "<|reserved_200018|> <|endofprompt|> <|fim_prefix|>x<|fim_suffix|> <|return|><|call|> <|not_special|> <|",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|end_of_text|>",
      "Text with a trailing special token<|endoftext|>",
      "a <mask> b   <mask>x<mask><mask>\t<mask>\n",
      "<sep>   y <sep>\n\nz<sep>",
      "x  <|lr|>  y<|lr|><|lr|>  ",
      "a<tool_call>b <tool_call> </tool_call>",
      "word words sword word_ word. (word) wordword 1word word1 -word- wörd",
      "cafe\u0301 café café\u0301 Cafe\u0301",
      "ABC DEF HTTPServer 123 4.5! ok? fine. Done!? A1B2C3 ||x|| ||",
      repeat("a", 5000),
      repeat("ab", 3000),
      repeat("1234567890", 200),
      repeat(" ", 1000) + "x" + repeat("\n", 300),
      repeat("😀", 300),
      repeat("\t", 70) + repeat(" \n", 90) + repeat("\u3000", 40) + "end" + repeat("\r\n", 50),
      repeat("!", 700),
      repeat("Supercalifragilisticexpialidocious", 60),
  };
  std::mt19937 rng(4321);
  const std::vector<std::string> pool = {
      "a", "Z", "e", "Q", "'", "'s", "'LL", "'d", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "7", "42", "1234",
      "٣", "½", ".", ",", "!", "?", "/", "-", "_", "(", ")", "\"", "<|", "|>", "é", "ß", "Ω", "ж", "Ж",
      "\u0301", "\u00a0", "\u2003", "\u3000", "中", "文", "の", "カ", "한", "😀", "👍🏽", "\u200d", "ǅ", "ʰ",
      "<mask>", "<sep>", "word", "||", "<|endoftext|>", "<|start|>", "<|eot_id|>", "e\u0301", "ह", "ि", "ع"};
  for (int i = 0; i < 40; ++i) {
    std::string mix;
    int n = 5 + static_cast<int>(rng() % 120);
    for (int k = 0; k < n; ++k) mix += pool[rng() % pool.size()];
    t.push_back(mix);
  }
  t.push_back(
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light.");
  // Not UTF-8 (no reference: `tokenizers` takes str only; Kiln round-trips the bytes).
  t.push_back("\xff\xfe\xfd bytes \xc3 cut \xe6\x97 end\x80 \xed\xa0\x80 surrogate <|endoftext|>\xf0\x9f\x98");
  t.push_back("Hello \xff world \xf0\x9f\x98\x80 \x80\x81\x82 '\xc3's <mask>\xff");
  return t;
}

// Rust's String::from_utf8_lossy, which `tokenizers`' decode ends with: each maximal
// ill-formed subsequence becomes one U+FFFD.
std::string lossy(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
    else if (b == 0xED) need = 2, hi = 0x9F;
    else if (b == 0xF0) need = 3, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) need = 3, hi = 0x8F;
    size_t j = i + 1, k = 0;
    while (k < need && j < s.size()) {
      const auto c = static_cast<unsigned char>(s[j]);
      if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF)) break;
      ++j, ++k;
    }
    if (need > 0 && k == need) out.append(s, i, j - i);
    else out += "\uFFFD";
    i = j;
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xF0 && b < 0xF5 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += n;
  }
  return true;
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

// The generated tokenizer.json files live in a fresh directory, removed when the binary exits.
struct ReferenceDir {
  std::string path;
  ReferenceDir() {
    std::string tmpl = ::testing::TempDir() + "kiln_hf_tokenizer_XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~ReferenceDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// The reference's tokenizer.json files and answers for reference_texts(), computed once.
const json& reference() {
  static ReferenceDir dir;
  static const json ref = [] {
    const std::string python = KILN_VENV_PYTHON;
    if (!fs::exists(python)) {
      ADD_FAILURE() << python << " is missing: run scripts/setup_venv.sh (tokenizers, tiktoken from PyPI)";
      return json();
    }
    if (dir.path.empty()) {
      ADD_FAILURE() << "cannot make a temporary directory under " << ::testing::TempDir();
      return json();
    }
    std::vector<std::string> texts_b64;
    for (const std::string& text : reference_texts()) texts_b64.push_back(base64(text));
    const std::string in_path = dir.path + "/input.json";
    std::ofstream(in_path) << json({{"texts_b64", texts_b64}, {"split_patterns", split_patterns()}}).dump();
    const std::string script = std::string(KILN_SOURCE_DIR) + "/tests/reference/hf_tokenizer_ref.py";
    testing::CliRun run =
        testing::run_command(python, "'" + script + "' '" + kTokenizerDir + "' '" + dir.path + "' '" + in_path + "'");
    if (run.exit_code != 0) {
      ADD_FAILURE() << "hf_tokenizer_ref.py failed: " << run.err;
      return json();
    }
    return json::parse(run.out);
  }();
  return ref;
}

// One test case for everything the reference computes: CTest runs each case in a process of
// its own, and the reference takes seconds to build the files.
TEST(HfTokenizerReference, SplitsAndIdsEqualTheTokenizersPackage) {
  KILN_REQUIRE_TIKTOKEN_FILES();
  const json& ref = reference();
  ASSERT_FALSE(ref.is_null());
  const std::vector<std::string> texts = reference_texts();

  // The split patterns, read as Oniguruma reads them.
  const std::vector<std::string> patterns = split_patterns();
  ASSERT_EQ(ref["splits"].size(), patterns.size());
  for (size_t k = 0; k < patterns.size(); ++k) {
    SCOPED_TRACE("pattern " + patterns[k]);
    auto pcre2 = hf::onig_to_pcre2(patterns[k]);
    ASSERT_TRUE(pcre2.ok()) << pcre2.status().message();
    hf::PreTokenizerStep step;
    step.pattern = *pcre2;
    auto split = hf::PreTokenizer::compile({step});
    ASSERT_TRUE(split.ok()) << split.status().message();
    for (size_t i = 0; i < texts.size(); ++i) {
      if (ref["splits"][k][i].is_null()) continue;
      std::vector<std::string> pieces;
      (*split)->split(texts[i], [&](std::string_view piece) { pieces.emplace_back(piece); });
      EXPECT_EQ(pieces, ref["splits"][k][i].get<std::vector<std::string>>()) << "text " << i << ": " << texts[i];
    }
  }

  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    ASSERT_TRUE(ref["variants"].contains(variant));
    const json& r = ref["variants"][variant];
    // One variant through its directory, the others through the file itself.
    const std::string file = r["file"].get<std::string>();
    const std::string path = std::string(variant) == "o200k_harmony" ? fs::path(file).parent_path().string() : file;
    auto loaded = make_tokenizer("huggingface", path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    const Tokenizer& t = **loaded;
    EXPECT_EQ(t.name(), "huggingface:" + file);
    EXPECT_EQ(t.vocab_size(), r["vocab_size"].get<int64_t>());
    EXPECT_EQ(t.bos_id(), r["bos"].get<int32_t>());
    EXPECT_EQ(t.eos_id(), r["eos"].get<int32_t>());
    const bool text_preserving = std::string(variant) != "gpt2_style" && std::string(variant) != "llama3_style";
    for (size_t i = 0; i < texts.size(); ++i) {
      SCOPED_TRACE("text " + std::to_string(i) + ": " + texts[i].substr(0, 60));
      const std::vector<int32_t> ids = t.encode(texts[i]);
      auto back = t.decode(ids);
      ASSERT_TRUE(back.ok()) << back.status().message();
      if (r["ids"][i].is_null()) {
        ASSERT_FALSE(valid_utf8(texts[i]));
        if (text_preserving) {
          EXPECT_EQ(*back, texts[i]);  // invalid UTF-8 round-trips byte for byte
        }
        continue;
      }
      EXPECT_EQ(ids, r["ids"][i].get<std::vector<int32_t>>());
      // The post-processor's tokens are exactly BOS and EOS around the ids.
      std::vector<int32_t> with_special = ids;
      if (t.bos_id() >= 0) with_special.insert(with_special.begin(), t.bos_id());
      if (t.eos_id() >= 0) with_special.push_back(t.eos_id());
      EXPECT_EQ(with_special, r["with_special"][i].get<std::vector<int32_t>>());
      EXPECT_EQ(lossy(*back), r["decoded"][i].get<std::string>());  // Kiln keeps the bytes as they are
      if (text_preserving) {
        EXPECT_EQ(*back, texts[i]);
      }
    }
  }
  // encode() is thread-safe: two threads at once give the same ids.
  auto t = HfTokenizer::load(ref["variants"]["o200k_harmony"]["file"].get<std::string>());
  ASSERT_TRUE(t.ok());
  std::vector<std::vector<int32_t>> got[2];
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      for (const std::string& text : texts) got[k].push_back((*t)->encode(text));
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(got[0], got[1]);
  EXPECT_FALSE((*t)->decode({201088}).ok());
  EXPECT_FALSE((*t)->decode({-1}).ok());
}

// --- Small tokenizer.json files built here ----------------------------------------------

// GPT-2's byte alphabet: how tokenizer.json spells the bytes of a byte-level token.
std::string spell(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    uint32_t cp = b;
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (!printable) {
      cp = 256;
      for (int k = 0; k < b; ++k) {
        const bool p = (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE);
        if (!p) ++cp;
      }
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// A byte-level BPE tokenizer.json: the 256 byte tokens (id = byte), then `tokens` (ids 256,
// 257, ...), `merges` in rank order, a ByteLevel pre-tokenizer and decoder.
json tiny_tokenizer(const std::vector<std::string>& tokens, const std::vector<std::pair<std::string, std::string>>& merges,
                    bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
  for (size_t i = 0; i < tokens.size(); ++i) vocab[spell(tokens[i])] = 256 + static_cast<int>(i);
  json list = json::array();
  for (const auto& [a, b] : merges) list.push_back({spell(a), spell(b)});
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", list}}}};
}

Result<std::unique_ptr<HfTokenizer>> from_json(const json& j) { return HfTokenizer::from_json("t.json", j.dump()); }

// `tokenizers` merges by the rank of the PAIR: with merges (a, b), (b, c), (a, bc), "abc"
// becomes ab + c, since (ab, c) is not a listed merge (tiktoken, ranking the merged bytes,
// would reach abc). With ignore_merges, a piece that is a token is that token.
TEST(HfTokenizer, MergesByPairRankAsTokenizersDoes) {
  const std::vector<std::string> tokens = {"ab", "bc", "abc"};
  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}, {"b", "c"}, {"a", "bc"}};
  auto plain = from_json(tiny_tokenizer(tokens, merges));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ((*plain)->encode("abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ((*plain)->encode("bc"), (std::vector<int32_t>{257}));
  EXPECT_EQ((*plain)->encode("xbc abc"), (std::vector<int32_t>{'x', 257, ' ', 256, 'c'}));
  auto whole = from_json(tiny_tokenizer(tokens, merges, /*ignore_merges=*/true));
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ((*whole)->encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(*(*whole)->decode({258, 'c', ' '}), "abcc ");
  // Both merge forms, "a b" and ["a", "b"], are read alike.
  json legacy = tiny_tokenizer(tokens, merges);
  legacy["model"]["merges"] = {"a b", "b c", "a bc"};
  auto strings = from_json(legacy);
  ASSERT_TRUE(strings.ok()) << strings.status().message();
  EXPECT_EQ((*strings)->encode("xbc abc"), (*plain)->encode("xbc abc"));
  EXPECT_EQ((*plain)->vocab_size(), 259);
  EXPECT_EQ((*plain)->bos_id(), -1);
  EXPECT_FALSE((*plain)->decode({259}).ok());
}

TEST(HfBpe, HeapAndLinearMergesAgreeOnLongPieces) {
  // The 256 bytes, then merges of a/b/c pairs and triples (several splits each) in a seeded
  // order, ranks unrelated to ids.
  std::mt19937 rng(7);
  std::vector<std::string> merged;
  for (char x : std::string("abc"))
    for (char y : std::string("abc")) merged.push_back({x, y});
  for (char x : std::string("abc"))
    for (char y : std::string("abc"))
      for (char z : std::string("abc")) merged.push_back({x, y, z});
  merged.push_back("abab");
  merged.push_back("cccc");
  hf::BpeModel model;
  std::map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) ids[std::string(1, static_cast<char>(b))] = b;
  for (const std::string& m : merged) ids[m] = static_cast<int32_t>(ids.size()) + 1000;  // ids with gaps
  for (const auto& [bytes, id] : ids) ASSERT_TRUE(model.add_token(bytes, id));
  std::vector<std::array<int32_t, 3>> pairs;
  for (const std::string& m : merged) {
    for (size_t i = 1; i < m.size(); ++i) {
      if (ids.count(m.substr(0, i)) && ids.count(m.substr(i))) pairs.push_back({ids[m.substr(0, i)], ids[m.substr(i)], ids[m]});
    }
  }
  std::shuffle(pairs.begin(), pairs.end(), rng);
  for (size_t r = 0; r < pairs.size(); ++r) {
    if (r % 5 != 4) model.add_merge(pairs[r][0], pairs[r][1], pairs[r][2], static_cast<uint32_t>(r));  // some missing
  }
  ASSERT_EQ(model.missing_byte(), -1);
  for (int trial = 0; trial < 50; ++trial) {
    std::string piece;
    size_t n = 2 + rng() % 400;
    for (size_t i = 0; i < n; ++i) piece += "abc"[rng() % (trial % 2 ? 2 : 3)];
    std::vector<int32_t> linear, heap;
    model.merge_linear(piece, linear);
    model.merge_heap(piece, heap);
    EXPECT_EQ(linear, heap) << piece;
    EXPECT_LT(linear.size(), piece.size());
  }
}

// The Oniguruma (Ruby syntax) constructs whose PCRE2 reading differs are rewritten; the
// reference test checks the results against `tokenizers` itself.
TEST(HfRegex, RewritesWhatOnigurumaReadsDifferently) {
  const std::string kWord = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";
  const std::pair<std::string, std::string> cases[] = {
      {R"(\p{N}{1,3}+| ?\p{L}++|\s+(?!\S))", R"((?:\p{N}{1,3})+| ?\p{L}++|\p{White_Space}+(?!\P{White_Space}))"},
      {R"((ab){2}+c{,3}x{2,}?)", R"((?:(ab){2})+c{0,3}x{2,}?)"},
      {R"([^\s\p{L}\h]\h\H)", R"([^\p{White_Space}\p{L}0-9a-fA-F][0-9a-fA-F][^0-9a-fA-F])"},
      {R"(\w+[\w-]\W)", "[" + kWord + "]+[" + kWord + "-][^" + kWord + "]"},
      {R"(\bx\B)", "(?:(?<=[" + kWord + "])(?![" + kWord + "])|(?<![" + kWord + "])(?=[" + kWord + "]))x(?:(?<=[" +
                       kWord + "])(?=[" + kWord + "])|(?<![" + kWord + "])(?![" + kWord + "]))"},
      {R"(^a$|b)", R"((?m)^a$|b)"},
      {R"((?m)a.b(?mi:.)(?i)c)", R"((?s)a.b(?si:.)(?i)c)"},
      {R"(\u00e9[\u3040-\u309f]{x}[]a][[:alpha:]])", R"(\x{00e9}[\x{3040}-\x{309f}]\{x}[\]a][[:alpha:]])"},
      {R"((?i:'s|'t)|[^\r\n]?\p{L}+)", R"((?i:'s|'t)|[^\r\n]?\p{L}+)"},  // unchanged
  };
  for (const auto& [onig, pcre2] : cases) {
    auto got = hf::onig_to_pcre2(onig);
    ASSERT_TRUE(got.ok()) << onig << ": " << got.status().message();
    EXPECT_EQ(*got, pcre2) << onig;
  }
  for (const char* refused : {R"([\W])", R"([a[b]])", R"([a-z&&[^x]])", R"((a)", R"(a))", R"(\)"}) {
    EXPECT_FALSE(hf::onig_to_pcre2(refused).ok()) << refused;
  }
}

// Each refusal is one line that names the file, the field and what is accepted.
void expect_refused(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.message();
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

TEST(HfTokenizer, RefusesAWordPieceModel) {
  json j = tiny_tokenizer({}, {});
  j["model"] = {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"vocab", {{"[UNK]", 0}}}};
  expect_refused(from_json(j).status(), StatusCode::kInvalidArgument,
                 {"t.json: model.type WordPiece is not supported", "accepted: BPE (byte-level)"});
  j["model"]["type"] = "Unigram";
  expect_refused(from_json(j).status(), StatusCode::kInvalidArgument, {"model.type Unigram", "accepted: BPE"});
}

TEST(HfTokenizer, RefusesAnUnsupportedNormalizer) {
  json j = tiny_tokenizer({}, {});
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_refused(from_json(j).status(), StatusCode::kInvalidArgument,
                 {"t.json: normalizer Lowercase is not supported", "accepted: null or NFC"});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKC"}}}}};
  expect_refused(from_json(j).status(), StatusCode::kInvalidArgument, {"normalizer.normalizers[1] NFKC"});
  j["normalizer"] = {{"type", "NFC"}};
  auto nfc = from_json(j);
  if (nfc_available()) {
    ASSERT_TRUE(nfc.ok()) << nfc.status().message();
    EXPECT_EQ((*nfc)->encode("e\u0301"), (*nfc)->encode("\u00e9"));
  } else {
    expect_refused(nfc.status(), StatusCode::kUnimplemented, {"normalizer NFC needs ICU"});
  }
}

TEST(HfTokenizer, RefusesMalformedJson) {
  expect_refused(HfTokenizer::from_json("t.json", "{\"model\": {\"type\": \"BPE\",\n").status(),
                 StatusCode::kInvalidArgument, {"t.json: not valid JSON (syntax error at byte"});
  expect_refused(HfTokenizer::from_json("t.json", "[1, 2]").status(), StatusCode::kInvalidArgument,
                 {"t.json: not a tokenizer.json"});
}

TEST(HfTokenizer, MissingFileOrDirectoryNamesThePath) {
  expect_refused(make_tokenizer("huggingface", "/nonexistent/tokenizer.json").status(), StatusCode::kNotFound,
                 {"tokenizer_path=/nonexistent/tokenizer.json: no such file or directory", "never downloaded"});
  // A hub name is not a path: Kiln reads files only.
  expect_refused(make_tokenizer("huggingface", "openai/gpt-oss-20b").status(), StatusCode::kNotFound,
                 {"tokenizer_path=openai/gpt-oss-20b"});
  expect_refused(make_tokenizer("huggingface", "").status(), StatusCode::kInvalidArgument,
                 {"tokenizer_type=huggingface needs tokenizer_path"});
  std::string dir = ::testing::TempDir() + "kiln_hf_empty_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  expect_refused(make_tokenizer("huggingface", dir).status(), StatusCode::kNotFound,
                 {"tokenizer_path=" + dir + ": the directory has no tokenizer.json"});
  std::ofstream(dir + "/tokenizer.json") << tiny_tokenizer({"ab"}, {{"a", "b"}}).dump();
  auto ok = make_tokenizer("huggingface", dir);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ((*ok)->encode("ab"), (std::vector<int32_t>{256}));
  fs::remove_all(dir);
}

TEST(HfTokenizer, RefusalsNameTheFieldAndWhatIsAccepted) {
  struct Case {
    std::string what;
    std::function<void(json&)> edit;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"no vocab", [](json& j) { j["model"].erase("vocab"); }, {"t.json: model.vocab is missing"}},
      {"no model", [](json& j) { j.erase("model"); }, {"t.json: model is missing"}},
      {"merge of an unknown token", [](json& j) { j["model"]["merges"] = {"a zz"}; },
       {"model.merges[0]: \"zz\" is not in model.vocab"}},
      {"merge with two spaces", [](json& j) { j["model"]["merges"] = {"a b c"}; },
       {"model.merges[0] \"a b c\" is not two tokens separated by one space"}},
      {"Metaspace", [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}}; },
       {"pre_tokenizer Metaspace is not supported", "accepted: ByteLevel, or a Sequence of Split steps"}},
      {"no pre-tokenizer", [](json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer null is not supported"}},
      {"Split only",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
       },
       {"pre_tokenizer without ByteLevel"}},
      {"bad regex",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}},
                                 {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       {"t.json: pre_tokenizer.pretokenizers[0].pattern.Regex: split pattern has an unclosed ("}},
      {"regex PCRE2 refuses",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{Nope}"}}}, {"behavior", "Isolated"}},
                                 {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       {"t.json: pre_tokenizer: split pattern does not compile"}},
      {"WordPiece decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; },
       {"decoder WordPiece is not supported", "accepted: ByteLevel"}},
      {"no decoder", [](json& j) { j["decoder"] = nullptr; }, {"decoder null is not supported"}},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback true"}},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout 0.1 is not supported"}},
      {"subword prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       {"model.continuing_subword_prefix \"##\""}},
      {"missing byte", [](json& j) { j["model"]["vocab"].erase(spell("\x01")); },
       {"model.vocab has no token for byte 0x01"}},
      {"added token id",
       [](json& j) { j["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", true}}}; },
       {"added_tokens[0] \"<s>\" has id 300, but tokenizers gives it 257"}},
      {"template with two BOS",
       [](json& j) {
         j["added_tokens"] = {{{"id", 257}, {"content", "<s>"}, {"special", true}}};
         json s = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {s, s, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {257}}, {"tokens", {"<s>"}}}}}}};
       },
       {"post_processor.single adds 2 tokens before the text and 0 after"}},
      {"unknown post-processor", [](json& j) { j["post_processor"] = {{"type", "Whatever"}}; },
       {"post_processor Whatever is not supported"}},
      {"version", [](json& j) { j["version"] = "2.0"; }, {"version \"2.0\" is not supported"}},
      {"id not a number", [](json& j) { j["model"]["vocab"]["ab"] = "x"; },
       {"model.vocab[\"ab\"] is not a token id"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json j = tiny_tokenizer({"ab"}, {{"a", "b"}});
    c.edit(j);
    expect_refused(from_json(j).status(), StatusCode::kInvalidArgument, c.parts);
  }
}

// The post-processor gives BOS/EOS: TemplateProcessing, Bert/Roberta, inside a Sequence.
TEST(HfTokenizer, BosAndEosComeFromThePostProcessor) {
  json j = tiny_tokenizer({"ab"}, {{"a", "b"}});
  j["added_tokens"] = {{{"id", 257}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                       {{"id", 258}, {"content", "</s>"}, {"special", true}, {"normalized", false}}};
  j["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 258}}, {"cls", {"<s>", 257}}};
  auto t = from_json(j);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->bos_id(), 257);
  EXPECT_EQ((*t)->eos_id(), 258);
  EXPECT_EQ((*t)->vocab_size(), 259);
  EXPECT_EQ((*t)->encode("<s>ab</s>"), (std::vector<int32_t>{257, 256, 258}));  // added tokens in the text count
  EXPECT_EQ(*(*t)->decode({257, 256, 258}), "<s>ab</s>");
  json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  json eos = {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single", {a, eos}},
         {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {258}}, {"tokens", {"</s>"}}}}}}}}}};
  t = from_json(j);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->bos_id(), -1);
  EXPECT_EQ((*t)->eos_id(), 258);
}

}  // namespace
}  // namespace kiln::data
