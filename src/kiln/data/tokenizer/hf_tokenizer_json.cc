#include "kiln/data/tokenizer/hf_tokenizer_json.h"

#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/data/tokenizer/bpe.h"
#include "kiln/data/tokenizer/hf_regex.h"

namespace kiln::data::hf {

namespace {

using json = nlohmann::json;

constexpr std::string_view kModels = "BPE (byte-level)";
constexpr std::string_view kNormalizers = "null or NFC";
constexpr std::string_view kPreTokenizers = "ByteLevel, or a Sequence of Split steps ending in ByteLevel";
constexpr std::string_view kDecoders = "ByteLevel";
constexpr std::string_view kPostProcessors =
    "null, ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing or a Sequence of them";

// Field access with the field's path in every error: "FILE: model.merges[7] ...".
class Reader {
 public:
  explicit Reader(const std::string& file) : file_(file) {}

  template <typename... Args>
  Status error(fmt::format_string<Args...> f, Args&&... args) const {
    return invalid_argument("{}: {}", file_, fmt::format(f, std::forward<Args>(args)...));
  }
  Status unsupported(const std::string& path, std::string_view type, std::string_view accepted) const {
    return error("{} {} is not supported by tokenizer_type=huggingface; accepted: {}", path, type, accepted);
  }
  // The member `key` of object `obj` (at `path`); nullptr when absent or null.
  static const json* find(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  Result<const json*> require(const json& obj, const std::string& path, const char* key) const {
    const json* v = find(obj, key);
    if (v == nullptr) return error("{}{}{} is missing", path, path.empty() ? "" : ".", key);
    return v;
  }
  Result<const json*> require_object(const json& obj, const std::string& path, const char* key) const {
    KILN_ASSIGN_OR_RETURN(const json* v, require(obj, path, key));
    if (!v->is_object()) return error("{} is not an object", join(path, key));
    return v;
  }
  Result<std::string> string(const json& obj, const std::string& path, const char* key) const {
    KILN_ASSIGN_OR_RETURN(const json* v, require(obj, path, key));
    if (!v->is_string()) return error("{} is not a string", join(path, key));
    return v->get<std::string>();
  }
  Result<bool> boolean(const json& obj, const std::string& path, const char* key, bool fallback) const {
    const json* v = find(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return error("{} is not true or false", join(path, key));
    return v->get<bool>();
  }
  Result<int32_t> id(const json& v, const std::string& path) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= INT32_MAX) {
      return error("{} is not a token id (an integer in [0, 2^31 - 1))", path);
    }
    return v.get<int32_t>();
  }
  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

 private:
  const std::string& file_;
};

// A String split pattern is matched literally: escape every ASCII character that is not a
// letter or digit (PCRE2 takes "\" + any such character as that character).
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Status read_normalizer(const Reader& r, const json& n, const std::string& path, TokenizerSpec& spec) {
  if (!n.is_object()) return r.error("{} is not an object", path);
  KILN_ASSIGN_OR_RETURN(std::string type, r.string(n, path, "type"));
  if (type == "NFC") {
    spec.nfc = true;
    return ok_status();
  }
  if (type == "Sequence") {
    KILN_ASSIGN_OR_RETURN(const json* list, r.require(n, path, "normalizers"));
    if (!list->is_array()) return r.error("{}.normalizers is not a list", path);
    for (size_t i = 0; i < list->size(); ++i) {
      KILN_RETURN_IF_ERROR(read_normalizer(r, (*list)[i], fmt::format("{}.normalizers[{}]", path, i), spec));
    }
    return ok_status();
  }
  return r.unsupported(path, type, kNormalizers);
}

Status read_pre_tokenizer(const Reader& r, const json& p, const std::string& path, TokenizerSpec& spec) {
  if (!p.is_object()) return r.error("{} is not an object", path);
  KILN_ASSIGN_OR_RETURN(std::string type, r.string(p, path, "type"));
  if (type == "Sequence") {
    KILN_ASSIGN_OR_RETURN(const json* list, r.require(p, path, "pretokenizers"));
    if (!list->is_array()) return r.error("{}.pretokenizers is not a list", path);
    for (size_t i = 0; i < list->size(); ++i) {
      KILN_RETURN_IF_ERROR(read_pre_tokenizer(r, (*list)[i], fmt::format("{}.pretokenizers[{}]", path, i), spec));
    }
    return ok_status();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    // `tokenizers`' defaults: add_prefix_space and use_regex true.
    KILN_ASSIGN_OR_RETURN(step.add_prefix_space, r.boolean(p, path, "add_prefix_space", true));
    KILN_ASSIGN_OR_RETURN(step.use_regex, r.boolean(p, path, "use_regex", true));
  } else if (type == "Split") {
    KILN_ASSIGN_OR_RETURN(const json* pattern, r.require_object(p, path, "pattern"));
    if (const json* re = Reader::find(*pattern, "Regex"); re != nullptr && re->is_string()) {
      Result<std::string> translated = onig_to_pcre2(re->get<std::string>());
      if (!translated.ok()) return r.error("{}.pattern.Regex: {}", path, translated.status().message());
      step.pattern = std::move(translated).value();
    } else if (const json* s = Reader::find(*pattern, "String"); s != nullptr && s->is_string()) {
      step.pattern = escape_literal(s->get<std::string>());
      if (step.pattern.empty()) return r.error("{}.pattern.String is empty", path);
    } else {
      return r.error("{}.pattern is neither {{\"Regex\": ...}} nor {{\"String\": ...}}", path);
    }
    KILN_ASSIGN_OR_RETURN(std::string behavior, r.string(p, path, "behavior"));
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Removed", SplitBehavior::kRemoved},
        {"Isolated", SplitBehavior::kIsolated},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    bool known = false;
    for (const auto& [name, b] : kBehaviors) {
      if (behavior == name) step.behavior = b, known = true;
    }
    if (!known) {
      return r.error("{}.behavior {} is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                     path, behavior);
    }
    KILN_ASSIGN_OR_RETURN(step.invert, r.boolean(p, path, "invert", false));
  } else {
    return r.unsupported(path, type, kPreTokenizers);
  }
  if (!spec.pre_tokenizer.empty() && spec.pre_tokenizer.back().kind == PreTokenizerStep::Kind::kByteLevel) {
    return r.unsupported(path, type + " after ByteLevel", kPreTokenizers);
  }
  spec.pre_tokenizer.push_back(std::move(step));
  return ok_status();
}

Status read_decoder(const Reader& r, const json& d, const std::string& path) {
  if (!d.is_object()) return r.error("{} is not an object", path);
  KILN_ASSIGN_OR_RETURN(std::string type, r.string(d, path, "type"));
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence") {
    KILN_ASSIGN_OR_RETURN(const json* list, r.require(d, path, "decoders"));
    if (!list->is_array() || list->empty()) return r.error("{}.decoders is not a non-empty list", path);
    for (size_t i = 0; i < list->size(); ++i) {
      KILN_RETURN_IF_ERROR(read_decoder(r, (*list)[i], fmt::format("{}.decoders[{}]", path, i)));
    }
    return ok_status();
  }
  return r.unsupported(path, type, kDecoders);
}

// Sets BOS/EOS from the processors that add special tokens around a single sequence.
Status read_post_processor(const Reader& r, const json& p, const std::string& path, TokenizerSpec& spec,
                           bool& found) {
  if (!p.is_object()) return r.error("{} is not an object", path);
  KILN_ASSIGN_OR_RETURN(std::string type, r.string(p, path, "type"));
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence") {
    KILN_ASSIGN_OR_RETURN(const json* list, r.require(p, path, "processors"));
    if (!list->is_array()) return r.error("{}.processors is not a list", path);
    for (size_t i = 0; i < list->size(); ++i) {
      KILN_RETURN_IF_ERROR(
          read_post_processor(r, (*list)[i], fmt::format("{}.processors[{}]", path, i), spec, found));
    }
    return ok_status();
  }
  if (type != "TemplateProcessing" && type != "BertProcessing" && type != "RobertaProcessing") {
    return r.unsupported(path, type, kPostProcessors);
  }
  if (found) return r.error("{}: a second processor that adds special tokens (Kiln takes one)", path);
  found = true;
  if (type != "TemplateProcessing") {
    // cls = [text, id] before the sequence, sep = [text, id] after it.
    for (const char* key : {"cls", "sep"}) {
      KILN_ASSIGN_OR_RETURN(const json* v, r.require(p, path, key));
      if (!v->is_array() || v->size() != 2) return r.error("{}.{} is not [text, id]", path, key);
      KILN_ASSIGN_OR_RETURN(int32_t id, r.id((*v)[1], fmt::format("{}.{}[1]", path, key)));
      (std::string_view(key) == "cls" ? spec.bos : spec.eos) = id;
    }
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(const json* single, r.require(p, path, "single"));
  KILN_ASSIGN_OR_RETURN(const json* specials, r.require(p, path, "special_tokens"));
  if (!single->is_array()) return r.error("{}.single is not a list of pieces", path);
  std::vector<int32_t> before, after;
  bool sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const std::string at = fmt::format("{}.single[{}]", path, i);
    if (piece.is_object() && Reader::find(piece, "Sequence") != nullptr) {
      if (sequence) return r.error("{}: the text appears twice in the template", at);
      sequence = true;
      continue;
    }
    const json* token = piece.is_object() ? Reader::find(piece, "SpecialToken") : nullptr;
    if (token == nullptr || !token->is_object()) return r.error("{} is neither a SpecialToken nor a Sequence", at);
    KILN_ASSIGN_OR_RETURN(std::string name, r.string(*token, at + ".SpecialToken", "id"));
    const json* entry = specials->is_object() ? Reader::find(*specials, name.c_str()) : nullptr;
    if (entry == nullptr || !entry->is_object()) {
      return r.error("{}.special_tokens has no entry for {}, which {} names", path, name, at);
    }
    KILN_ASSIGN_OR_RETURN(const json* ids, r.require(*entry, path + ".special_tokens." + name, "ids"));
    if (!ids->is_array()) return r.error("{}.special_tokens.{}.ids is not a list", path, name);
    for (size_t k = 0; k < ids->size(); ++k) {
      KILN_ASSIGN_OR_RETURN(int32_t id, r.id((*ids)[k], fmt::format("{}.special_tokens.{}.ids[{}]", path, name, k)));
      (sequence ? after : before).push_back(id);
    }
  }
  if (!sequence) return r.error("{}.single has no Sequence piece (the text)", path);
  if (before.size() > 1 || after.size() > 1) {
    return r.error("{}.single adds {} tokens before the text and {} after; Kiln's input pipeline adds at most one "
                   "BOS and one EOS",
                   path, before.size(), after.size());
  }
  if (!before.empty()) spec.bos = before[0];
  if (!after.empty()) spec.eos = after[0];
  return ok_status();
}

Status read_model(const Reader& r, const json& m, TokenizerSpec& spec, bpe::RankTable& vocab_ids) {
  KILN_ASSIGN_OR_RETURN(std::string type, r.string(m, "model", "type"));
  if (type != "BPE") return r.unsupported("model.type", type, kModels);
  if (const json* d = Reader::find(m, "dropout"); d != nullptr && (!d->is_number() || d->get<double>() != 0.0)) {
    return r.error("model.dropout {} is not supported (BPE dropout is random); accepted: null or 0", d->dump());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = Reader::find(m, key); v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      return r.error("model.{} {} is not supported by byte-level BPE; accepted: null", key, v->dump());
    }
  }
  KILN_ASSIGN_OR_RETURN(bool byte_fallback, r.boolean(m, "model", "byte_fallback", false));
  if (byte_fallback) {
    return r.error("model.byte_fallback true (SentencePiece-style BPE) is not supported; accepted: false (byte-level BPE)");
  }
  KILN_ASSIGN_OR_RETURN(spec.ignore_merges, r.boolean(m, "model", "ignore_merges", false));

  KILN_ASSIGN_OR_RETURN(const json* vocab, r.require_object(m, "model", "vocab"));
  spec.vocab.reserve(vocab->size());
  for (const auto& [text, value] : vocab->items()) {
    KILN_ASSIGN_OR_RETURN(int32_t id, r.id(value, fmt::format("model.vocab[{}]", json(text).dump())));
    // Keys of a JSON object are distinct, so a failed insert is an id given twice.
    if (!vocab_ids.insert(text, static_cast<uint32_t>(id))) {
      return r.error("model.vocab gives id {} to two tokens, one of them {}", id, json(text).dump());
    }
    spec.vocab.push_back({text, id});
  }

  KILN_ASSIGN_OR_RETURN(const json* merges, r.require(m, "model", "merges"));
  if (!merges->is_array()) return r.error("model.merges is not a list");
  spec.merges.reserve(merges->size());
  std::string merged;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& entry = (*merges)[i];
    std::string_view left, right;
    if (entry.is_string()) {
      // The legacy form "a b": exactly one space (none of a byte-level token's characters is one).
      const std::string& s = entry.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return r.error("model.merges[{}] {} is not two tokens separated by one space", i, entry.dump());
      }
      left = std::string_view(s).substr(0, space);
      right = std::string_view(s).substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      left = entry[0].get_ref<const std::string&>();
      right = entry[1].get_ref<const std::string&>();
    } else {
      return r.error("model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", i);
    }
    merged.assign(left);
    merged.append(right);
    std::array<int32_t, 3> ids;
    const std::string_view parts[3] = {left, right, merged};
    for (int k = 0; k < 3; ++k) {
      const uint32_t id = vocab_ids.find(parts[k]);
      if (id == bpe::RankTable::kNone) {
        return r.error("model.merges[{}]: {} is not in model.vocab", i, json(std::string(parts[k])).dump());
      }
      ids[k] = static_cast<int32_t>(id);
    }
    spec.merges.push_back(ids);
  }
  return ok_status();
}

// added_tokens, with the ids `tokenizers` gives them on load: the vocabulary's id for a text
// the model has, else the next id after the model's vocabulary (entries counted), in file
// order. A file whose ids disagree is refused (`tokenizers` would warn and renumber).
Status read_added_tokens(const Reader& r, const json& list, TokenizerSpec& spec, const bpe::RankTable& vocab_ids) {
  if (!list.is_array()) return r.error("added_tokens is not a list");
  std::unordered_map<std::string, int32_t> added;
  int64_t next_id = static_cast<int64_t>(spec.vocab.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    if (!t.is_object()) return r.error("{} is not an object", path);
    AddedTokenSpec a;
    KILN_ASSIGN_OR_RETURN(a.content, r.string(t, path, "content"));
    KILN_ASSIGN_OR_RETURN(const json* id, r.require(t, path, "id"));
    KILN_ASSIGN_OR_RETURN(a.id, r.id(*id, path + ".id"));
    KILN_ASSIGN_OR_RETURN(a.special, r.boolean(t, path, "special", false));
    KILN_ASSIGN_OR_RETURN(a.single_word, r.boolean(t, path, "single_word", false));
    KILN_ASSIGN_OR_RETURN(a.lstrip, r.boolean(t, path, "lstrip", false));
    KILN_ASSIGN_OR_RETURN(a.rstrip, r.boolean(t, path, "rstrip", false));
    KILN_ASSIGN_OR_RETURN(a.normalized, r.boolean(t, path, "normalized", !a.special));
    if (a.content.empty()) continue;  // `tokenizers` ignores empty ones
    int64_t expected;
    if (auto it = added.find(a.content); it != added.end()) {
      expected = it->second;
    } else if (const uint32_t v = vocab_ids.find(a.content); v != bpe::RankTable::kNone) {
      expected = v;
    } else {
      expected = next_id++;
    }
    if (expected != a.id) {
      return r.error("{} {} has id {}, but tokenizers gives it {} (the vocabulary's id of that text, else the next "
                     "one after the {} vocabulary entries, in file order)",
                     path, json(a.content).dump(), a.id, expected, spec.vocab.size());
    }
    added[a.content] = a.id;
    spec.added_tokens.push_back(std::move(a));
  }
  return ok_status();
}

}  // namespace

Result<TokenizerSpec> parse_tokenizer_json(const std::string& file, const std::string& text) {
  Reader r(file);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return r.error("not valid JSON (syntax error at byte {})", e.byte);
  }
  if (!doc.is_object()) return r.error("not a tokenizer.json (the top level is not an object)");
  if (const json* v = Reader::find(doc, "version"); v != nullptr && *v != "1.0") {
    return r.error("version {} is not supported; accepted: \"1.0\"", v->dump());
  }
  TokenizerSpec spec;
  KILN_ASSIGN_OR_RETURN(const json* model, r.require_object(doc, "", "model"));
  bpe::RankTable vocab_ids;  // token text (as spelled in the file) -> id
  KILN_RETURN_IF_ERROR(read_model(r, *model, spec, vocab_ids));
  if (const json* n = Reader::find(doc, "normalizer")) KILN_RETURN_IF_ERROR(read_normalizer(r, *n, "normalizer", spec));

  const json* pre = Reader::find(doc, "pre_tokenizer");
  if (pre != nullptr) KILN_RETURN_IF_ERROR(read_pre_tokenizer(r, *pre, "pre_tokenizer", spec));
  if (spec.pre_tokenizer.empty() || spec.pre_tokenizer.back().kind != PreTokenizerStep::Kind::kByteLevel) {
    return r.unsupported("pre_tokenizer", pre == nullptr ? "null" : "without ByteLevel", kPreTokenizers);
  }
  const json* decoder = Reader::find(doc, "decoder");
  if (decoder == nullptr) return r.unsupported("decoder", "null", kDecoders);
  KILN_RETURN_IF_ERROR(read_decoder(r, *decoder, "decoder"));
  if (const json* p = Reader::find(doc, "post_processor")) {
    bool found = false;
    KILN_RETURN_IF_ERROR(read_post_processor(r, *p, "post_processor", spec, found));
  }
  if (const json* added = Reader::find(doc, "added_tokens")) {
    KILN_RETURN_IF_ERROR(read_added_tokens(r, *added, spec, vocab_ids));
  }
  return spec;
}

}  // namespace kiln::data::hf
