#include "kiln/data/tokenizer/tiktoken.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/base/sha256.h"
#include "kiln/data/tokenizer/tiktoken_encodings.h"
#include "kiln/data/tokenizer/tiktoken_file.h"

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

using Tokens = std::vector<std::pair<std::string, int32_t>>;

Result<std::string> read_file(const std::string& key, const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return io_error("{}: cannot read {}", key, file);
  return text.str();
}

// The JSON encoder form (pat_str, special_tokens and bpe_ranks: whitespace-separated base64
// tokens with consecutive ranks, "! N" setting the next rank), for encodings of one's own.
Status parse_json_encoder(const std::string& key, const std::string& file, const std::string& text,
                          std::string& pattern, Tokens& tokens, Tokens& specials) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pat_str") || !j["pat_str"].is_string() ||
      !j.contains("bpe_ranks") || !j["bpe_ranks"].is_string()) {
    return invalid_argument("{}: {} is not a tiktoken encoder file (needs string fields pat_str and bpe_ranks)", key, file);
  }
  pattern = j["pat_str"].get<std::string>();
  const std::string& ranks = j["bpe_ranks"].get_ref<const std::string&>();
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
    if (rank > INT32_MAX - 1) return invalid_argument("{}: {}: bpe_ranks rank {} is too large", key, file, rank);
    tokens.push_back({bytes, static_cast<int32_t>(rank)});
    ++rank;
  }
  if (j.contains("special_tokens") && j["special_tokens"].is_object()) {
    for (const auto& [s, id] : j["special_tokens"].items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX) {
        return invalid_argument("{}: {}: special token {} has no integer id in [0, 2^31 - 1)", key, file, s);
      }
      specials.push_back({s, id.get<int32_t>()});
    }
  }
  return ok_status();
}

std::string default_directory() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return (fs::path(xdg) / "kiln" / "tiktoken").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr && *home != '\0' ? home : ".") / ".cache" / "kiln" / "tiktoken").string();
}

}  // namespace

std::string tiktoken_encodings_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* env = std::getenv("KILN_TOKENIZER_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : default_directory();
}

Result<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::load(const std::string& name_or_path, Options options) {
  const std::string key = fmt::format("tokenizer_path={}", name_or_path.empty() ? "\"\"" : name_or_path);
  const std::string accepted =
      fmt::format("an encoding name ({}), a .tiktoken file of one of them, or an encoder .json", tiktoken_encoding_names());
  if (name_or_path.empty()) return invalid_argument("tokenizer_type=tiktoken needs tokenizer_path: {}", accepted);
  std::string encoding, pattern;
  Tokens tokens, specials;
  std::error_code ec;
  if (name_or_path.ends_with(".json")) {
    if (!fs::exists(name_or_path, ec)) return not_found("{}: encoder file not found; accepted: {}", key, accepted);
    KILN_ASSIGN_OR_RETURN(std::string text, read_file(key, name_or_path));
    KILN_RETURN_IF_ERROR(parse_json_encoder(key, name_or_path, text, pattern, tokens, specials));
    encoding = fs::path(name_or_path).stem().string();
  } else {
    const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".tiktoken");
    const TiktokenEncoding* known = nullptr;
    std::string file;
    if (is_path) {
      file = name_or_path;
      if (!fs::is_regular_file(file, ec)) return not_found("{}: file not found; accepted: {}", key, accepted);
      known = find_tiktoken_encoding(fs::path(file).stem().string());
    } else {
      known = find_tiktoken_encoding(name_or_path);
      if (known == nullptr) return invalid_argument("{}: unknown tiktoken encoding; accepted: {}", key, accepted);
      const std::string dir = tiktoken_encodings_dir(options.directory);
      const std::string how = "put OpenAI's published .tiktoken files there (docs/data.md), or set tokenizer_dir or "
                              "KILN_TOKENIZER_DIR to the folder that holds them";
      if (!fs::is_directory(dir, ec)) return not_found("{}: tokenizer directory {} does not exist; {}", key, dir, how);
      file = (fs::path(dir) / known->file).string();
      if (!fs::is_regular_file(file, ec)) {
        return not_found("{}: {} not found (the published ranks of {}); {}", key, file, known->name, how);
      }
    }
    KILN_ASSIGN_OR_RETURN(std::string text, read_file(key, file));
    // Lines first: a truncated or edited line is named by its number; then the digest.
    KILN_ASSIGN_OR_RETURN(tokens, parse_tiktoken_ranks(text, file));
    const std::string digest = sha256_hex(text);
    if (known == nullptr) known = find_tiktoken_encoding_by_sha256(digest);
    if (known == nullptr) {
      return invalid_argument("{}: sha256 {} is not that of a published tiktoken file; accepted: {}", file, digest,
                              accepted);
    }
    if (digest != known->sha256) {
      return invalid_argument("{}: sha256 {} differs from the published {} of {} (an altered or truncated copy)", file,
                              digest, known->sha256, known->file);
    }
    encoding = std::string(known->name);
    pattern = std::string(known->pattern);
    specials = known->special_tokens;
  }
  return build(key, encoding, pattern, std::move(tokens), specials, options);
}

Result<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::build(const std::string& key, const std::string& encoding,
                                                                  const std::string& pattern,
                                                                  std::vector<std::pair<std::string, int32_t>> tokens,
                                                                  const std::vector<std::pair<std::string, int32_t>>& specials,
                                                                  const Options& options) {
  std::unique_ptr<TiktokenTokenizer> t(new TiktokenTokenizer());
  t->encoding_ = encoding;
  t->pattern_ = pattern;
  Result<std::unique_ptr<Pretokenizer>> pre = Pretokenizer::compile(t->pattern_);
  if (!pre.ok()) return pre.status().with_context(key);
  t->pretokenizer_ = std::move(pre).value();
  for (const auto& [bytes, rank] : tokens) {
    if (!t->ranks_.insert(bytes, static_cast<uint32_t>(rank))) {
      return invalid_argument("{}: lists a token twice (rank {})", key, rank);
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (t->ranks_.find(std::string(1, static_cast<char>(b))) == bpe::RankTable::kNone) {
      return invalid_argument("{}: not a byte-level BPE (no token for byte {})", key, b);
    }
  }

  int64_t vocab = 0;
  for (const auto& [b, id] : tokens) vocab = std::max<int64_t>(vocab, int64_t{id} + 1);
  for (const auto& [s, id] : specials) {
    if (id < 0) return invalid_argument("{}: special token {} has a negative id", key, s);
    vocab = std::max<int64_t>(vocab, int64_t{id} + 1);
  }
  t->vocab_size_ = vocab;
  t->decoder_.assign(static_cast<size_t>(vocab), std::string());
  t->known_.assign(static_cast<size_t>(vocab), 0);
  for (auto& [b, id] : tokens) {
    t->decoder_[static_cast<size_t>(id)] = std::move(b);
    t->known_[static_cast<size_t>(id)] = 1;
  }
  for (const auto& [s, id] : specials) {
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
