#include "kiln/data/tokenizer/tiktoken.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

#ifndef KILN_TIKTOKEN_DIR_DEFAULT
#define KILN_TIKTOKEN_DIR_DEFAULT "third_party_cache/npm/node_modules/tiktoken/encoders"
#endif

const char* const kKnownNames[] = {"o200k_harmony", "o200k_base", "cl100k_base", "gpt2",
                                   "r50k_base",     "p50k_base",  "p50k_edit"};

// Standard or URL-safe base64 with optional padding (the package's tokens use standard).
bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else if (c == '=') break;
    else return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

// GPT-OSS's harmony special tokens on top of o200k_base's (tiktoken's o200k_harmony).
std::vector<std::pair<std::string, int32_t>> harmony_specials() {
  std::vector<std::pair<std::string, int32_t>> s = {
      {"<|startoftext|>", 199998},     {"<|endoftext|>", 199999},       {"<|reserved_200000|>", 200000},
      {"<|reserved_200001|>", 200001}, {"<|return|>", 200002},          {"<|constrain|>", 200003},
      {"<|reserved_200004|>", 200004}, {"<|channel|>", 200005},         {"<|start|>", 200006},
      {"<|end|>", 200007},             {"<|message|>", 200008},         {"<|reserved_200009|>", 200009},
      {"<|reserved_200010|>", 200010}, {"<|reserved_200011|>", 200011}, {"<|call|>", 200012}};
  for (int32_t i = 200013; i < 201088; ++i) s.push_back({fmt::format("<|reserved_{}|>", i), i});
  return s;
}

}  // namespace

std::string tiktoken_encoders_dir() {
  const char* env = std::getenv("KILN_TIKTOKEN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(KILN_TIKTOKEN_DIR_DEFAULT);
}

Result<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::load(const std::string& name_or_path, Options options) {
  const std::string key = fmt::format("tokenizer_path={}", name_or_path.empty() ? "\"\"" : name_or_path);
  const std::string accepted = "o200k_harmony, o200k_base, cl100k_base, gpt2, r50k_base, p50k_base, p50k_edit or an encoder .json file";
  if (name_or_path.empty()) return invalid_argument("tokenizer_type=tiktoken needs tokenizer_path: {}", accepted);
  std::string encoding, file;
  bool harmony = false;
  const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  if (is_path) {
    file = name_or_path;
    encoding = fs::path(name_or_path).stem().string();
  } else {
    if (std::find(std::begin(kKnownNames), std::end(kKnownNames), name_or_path) == std::end(kKnownNames)) {
      return invalid_argument("{}: unknown tiktoken encoding; accepted: {}", key, accepted);
    }
    encoding = name_or_path;
    harmony = encoding == "o200k_harmony";
    file = (fs::path(tiktoken_encoders_dir()) / ((harmony ? "o200k_base" : encoding) + ".json")).string();
  }
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (is_path) return not_found("{}: encoder file not found", key);
    return not_found("{}: encoder file {} not found; run scripts/setup.sh (installs the npm package tiktoken@1.0.22) "
                     "or set KILN_TIKTOKEN_DIR",
                     key, file);
  }
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return io_error("{}: cannot read {}", key, file);
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pat_str") || !j["pat_str"].is_string() ||
      !j.contains("bpe_ranks") || !j["bpe_ranks"].is_string()) {
    return invalid_argument("{}: {} is not a tiktoken encoder file (needs string fields pat_str and bpe_ranks)", key, file);
  }

  std::unique_ptr<TiktokenTokenizer> t(new TiktokenTokenizer());
  t->encoding_ = encoding;
  t->pattern_ = j["pat_str"].get<std::string>();
  Result<std::unique_ptr<Pretokenizer>> pre = Pretokenizer::compile(t->pattern_);
  if (!pre.ok()) return pre.status().with_context(fmt::format("{}: {}", key, file));
  t->pretokenizer_ = std::move(pre).value();

  // bpe_ranks: whitespace-separated base64 tokens with consecutive ranks; "! N" sets the
  // rank of the next token to N (the package's compact form of a .tiktoken file).
  const std::string& ranks = j["bpe_ranks"].get_ref<const std::string&>();
  std::vector<std::pair<std::string, int32_t>> tokens;
  int64_t rank = 0;
  std::string bytes;
  size_t pos = 0;
  auto next_word = [&](std::string_view& word) {
    while (pos < ranks.size() && std::isspace(static_cast<unsigned char>(ranks[pos]))) ++pos;
    size_t start = pos;
    while (pos < ranks.size() && !std::isspace(static_cast<unsigned char>(ranks[pos]))) ++pos;
    word = std::string_view(ranks).substr(start, pos - start);
    return !word.empty();
  };
  std::string_view word;
  while (next_word(word)) {
    if (word == "!") {
      std::string_view num;
      if (!next_word(num) || num.find_first_not_of("0123456789") != std::string_view::npos || num.size() > 9) {
        return invalid_argument("{}: {}: bpe_ranks has \"!\" without a rank after it", key, file);
      }
      rank = std::stoll(std::string(num));
      continue;
    }
    if (!decode_base64(word, bytes) || bytes.empty()) {
      return invalid_argument("{}: {}: bpe_ranks token \"{}\" is not base64", key, file, word);
    }
    if (!t->ranks_.insert(bytes, static_cast<uint32_t>(rank))) {
      return invalid_argument("{}: {}: bpe_ranks lists a token twice (rank {})", key, file, rank);
    }
    tokens.push_back({bytes, static_cast<int32_t>(rank)});
    ++rank;
  }
  for (int b = 0; b < 256; ++b) {
    if (t->ranks_.find(std::string(1, static_cast<char>(b))) == bpe::RankTable::kNone) {
      return invalid_argument("{}: {}: not a byte-level BPE (no token for byte {})", key, file, b);
    }
  }

  std::vector<std::pair<std::string, int32_t>> specials;
  if (j.contains("special_tokens") && j["special_tokens"].is_object()) {
    for (const auto& [s, id] : j["special_tokens"].items()) {
      if (!id.is_number_integer()) return invalid_argument("{}: {}: special token {} has no integer id", key, file, s);
      specials.push_back({s, id.get<int32_t>()});
    }
  }
  if (harmony) {
    auto h = harmony_specials();
    specials.insert(specials.end(), h.begin(), h.end());
  }

  int64_t vocab = 0;
  for (const auto& [b, id] : tokens) vocab = std::max<int64_t>(vocab, int64_t{id} + 1);
  for (const auto& [s, id] : specials) vocab = std::max<int64_t>(vocab, int64_t{id} + 1);
  t->vocab_size_ = vocab;
  t->decoder_.assign(static_cast<size_t>(vocab), std::string());
  t->known_.assign(static_cast<size_t>(vocab), 0);
  for (auto& [b, id] : tokens) {
    t->decoder_[static_cast<size_t>(id)] = std::move(b);
    t->known_[static_cast<size_t>(id)] = 1;
  }
  for (const auto& [s, id] : specials) {
    if (id < 0) return invalid_argument("{}: {}: special token {} has a negative id", key, file, s);
    // A name listed twice keeps its last id (a JSON object, as in Python's dict update).
    t->special_[s] = id;
    // Two names for one id (o200k_harmony's 200018 is <|endofprompt|> and
    // <|reserved_200018|>): decode writes the first, the named one.
    if (!t->known_[static_cast<size_t>(id)]) {
      t->decoder_[static_cast<size_t>(id)] = s;
      t->known_[static_cast<size_t>(id)] = 1;
    }
  }
  t->bos_ = t->special_id("<|startoftext|>");
  t->eos_ = t->special_id("<|endoftext|>");

  // Which specials encode() recognises.
  t->allowed_.assign(static_cast<size_t>(vocab), 0);
  std::set<size_t> lengths;
  auto allow = [&](const std::string& s) {
    t->allowed_[static_cast<size_t>(t->special_.at(s))] = 1;
    t->special_first_[static_cast<unsigned char>(s[0])] = 1;
    lengths.insert(s.size());
    t->any_allowed_ = true;
  };
  for (const std::string& s : options.allowed_special) {
    if (s == "all") {
      for (const auto& [name, id] : t->special_) allow(name);
    } else if (t->special_.count(s)) {
      allow(s);
    } else {
      return invalid_argument("allowed special token {} is not a special token of {} (try \"all\")", s, encoding);
    }
  }
  // Only names whose id is allowed count as allowed (both names of a shared id are).
  t->special_lengths_.assign(lengths.rbegin(), lengths.rend());
  return t;
}

int32_t TiktokenTokenizer::special_id(const std::string& text) const {
  auto it = special_.find(text);
  return it == special_.end() ? -1 : it->second;
}

void TiktokenTokenizer::encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const {
  pretokenizer_->split(text, [&](std::string_view piece) { bpe::encode_piece(piece, ranks_, out); });
}

std::vector<int32_t> TiktokenTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  encode_ordinary_into(text, out);
  return out;
}

TiktokenTokenizer::SpecialMatch TiktokenTokenizer::next_special(std::string_view text, size_t from) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!special_first_[static_cast<unsigned char>(text[pos])]) continue;
    for (size_t len : special_lengths_) {
      if (pos + len > text.size()) continue;
      auto it = special_.find(std::string(text.substr(pos, len)));
      if (it != special_.end() && allowed_[static_cast<size_t>(it->second)]) return {pos, len, it->second};
    }
  }
  return {std::string_view::npos, 0, -1};
}

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view text) const {
  if (!any_allowed_) return encode_ordinary(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    SpecialMatch m = next_special(text, pos);
    if (m.pos == std::string_view::npos) {
      encode_ordinary_into(text.substr(pos), out);
      break;
    }
    encode_ordinary_into(text.substr(pos, m.pos - pos), out);
    out.push_back(m.id);
    pos = m.pos + m.length;
  }
  return out;
}

Result<std::string> TiktokenTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_ || !known_[static_cast<size_t>(id)]) {
      return invalid_argument("token id {} is not in the vocabulary of {} (size {})", id, name(), vocab_size_);
    }
    text += decoder_[static_cast<size_t>(id)];
  }
  return text;
}

}  // namespace kiln::data
