#include "kiln/data/tokenizer/tiktoken_encodings.h"

#include <fmt/format.h>

namespace kiln::data {

namespace {

// GPT-2's split (r50k_base, p50k_base, p50k_edit, gpt2), in tiktoken's faster equivalent form.
constexpr std::string_view kR50kPattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)";
constexpr std::string_view kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view kO200kSha = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d";
constexpr std::string_view kCl100kSha = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7";
constexpr std::string_view kP50kSha = "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069";
constexpr std::string_view kR50kSha = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930";

// GPT-OSS's harmony tokens on top of o200k_base's two: 199998..200012 named or reserved,
// then <|reserved_200013|> .. <|reserved_201087|> (vocab 201,088). 200018 keeps both names.
std::vector<std::pair<std::string, int32_t>> harmony_special_tokens() {
  std::vector<std::pair<std::string, int32_t>> s = {
      {"<|endoftext|>", 199999},       {"<|endofprompt|>", 200018},     {"<|startoftext|>", 199998},
      {"<|reserved_200000|>", 200000}, {"<|reserved_200001|>", 200001}, {"<|return|>", 200002},
      {"<|constrain|>", 200003},       {"<|reserved_200004|>", 200004}, {"<|channel|>", 200005},
      {"<|start|>", 200006},           {"<|end|>", 200007},             {"<|message|>", 200008},
      {"<|reserved_200009|>", 200009}, {"<|reserved_200010|>", 200010}, {"<|reserved_200011|>", 200011},
      {"<|call|>", 200012}};
  for (int32_t id = 200013; id < 201088; ++id) s.push_back({fmt::format("<|reserved_{}|>", id), id});
  return s;
}

std::vector<TiktokenEncoding> make_table() {
  const std::pair<std::string, int32_t> endoftext_50k = {"<|endoftext|>", 50256};
  return {
      {"o200k_harmony", "o200k_base.tiktoken", kO200kSha, kO200kPattern, harmony_special_tokens()},
      {"o200k_base", "o200k_base.tiktoken", kO200kSha, kO200kPattern,
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
      {"cl100k_base", "cl100k_base.tiktoken", kCl100kSha, kCl100kPattern,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"p50k_base", "p50k_base.tiktoken", kP50kSha, kR50kPattern, {endoftext_50k}},
      {"p50k_edit", "p50k_base.tiktoken", kP50kSha, kR50kPattern,
       {endoftext_50k, {"<|fim_prefix|>", 50281}, {"<|fim_middle|>", 50282}, {"<|fim_suffix|>", 50283}}},
      {"r50k_base", "r50k_base.tiktoken", kR50kSha, kR50kPattern, {endoftext_50k}},
      // GPT-2's ranks are r50k_base's; tiktoken builds them from GPT-2's original vocab.bpe
      // and encoder.json, published as the same bytes as r50k_base.tiktoken under this name.
      {"gpt2", "gpt2.tiktoken", kR50kSha, kR50kPattern, {endoftext_50k}},
  };
}

}  // namespace

const std::vector<TiktokenEncoding>& tiktoken_encodings() {
  static const std::vector<TiktokenEncoding> table = make_table();
  return table;
}

const TiktokenEncoding* find_tiktoken_encoding(std::string_view name) {
  for (const TiktokenEncoding& e : tiktoken_encodings()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const TiktokenEncoding* find_tiktoken_encoding_by_sha256(std::string_view sha256) {
  // o200k_base before o200k_harmony, p50k_base before p50k_edit, r50k_base before gpt2: a
  // file names the plain encoding; the others are asked for by name.
  for (std::string_view name : {"o200k_base", "cl100k_base", "p50k_base", "r50k_base"}) {
    const TiktokenEncoding* e = find_tiktoken_encoding(name);
    if (e->sha256 == sha256) return e;
  }
  return nullptr;
}

std::string tiktoken_encoding_names() {
  std::string names;
  for (const TiktokenEncoding& e : tiktoken_encodings()) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return names;
}

}  // namespace kiln::data
