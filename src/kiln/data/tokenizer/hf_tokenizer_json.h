// Reading a Hugging Face tokenizer.json into plain data: the parts of the format Kiln's
// byte-level BPE supports (hf_tokenizer.h), each checked, and everything else refused with
// one line naming the file, the field and what is accepted.
//
// Accepted (what GPT-2, Llama 3, Qwen2/3, DeepSeek and GPT-OSS-era files use):
//   model            BPE: vocab, merges ("a b" strings or [a, b] lists; rank = index),
//                    ignore_merges; dropout null or 0, no continuing_subword_prefix or
//                    end_of_word_suffix, byte_fallback false
//   normalizer       null or NFC (a Sequence of NFC too)
//   pre_tokenizer    ByteLevel, or a Sequence of Split steps (Regex or String pattern, any
//                    behavior, invert) ending in ByteLevel; Regex patterns are Oniguruma's,
//                    rewritten for PCRE2 here (hf_regex.h)
//   decoder          ByteLevel
//   post_processor   null, ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing or
//                    a Sequence of them: where BOS and EOS come from
//   added_tokens     content, id, special, single_word, lstrip, rstrip, normalized
// truncation and padding are ignored (the input pipeline packs sequences itself).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::data::hf {

// `tokenizers`' SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  // Split: a PCRE2 pattern (a Regex one rewritten by onig_to_pcre2, a String one escaped).
  std::string pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // ByteLevel.
  bool add_prefix_space = false, use_regex = false;
};

struct AddedTokenSpec {
  std::string content;
  int32_t id = -1;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

struct TokenizerSpec {
  bool nfc = false;
  std::vector<PreTokenizerStep> pre_tokenizer;
  // The model: vocabulary texts as tokenizer.json spells them (byte-level alphabet), and the
  // merges resolved to {left, right, merged} ids in rank order.
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::array<int32_t, 3>> merges;
  bool ignore_merges = false;
  std::vector<AddedTokenSpec> added_tokens;  // in file order, ids as `tokenizers` assigns them
  int32_t bos = -1, eos = -1;                // the post-processor's single-sequence tokens
};

// `file` names the file in errors; `text` is its contents.
Result<TokenizerSpec> parse_tokenizer_json(const std::string& file, const std::string& text);

}  // namespace kiln::data::hf
