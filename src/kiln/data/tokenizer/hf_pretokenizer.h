// A tokenizer.json's pre-tokenizer: its Split steps, then ByteLevel, applied to each piece
// the previous step made, in order (as `tokenizers` applies a Sequence; empty pieces are
// dropped). Patterns are compiled by PCRE2 as tiktoken's are (pretokenizer.h: UTF + UCP, JIT),
// which reads the Oniguruma patterns of these files (\p{L}, \p{N}, (?i:...), lookahead) alike.
//
//   Split      matches and the text between them, then kept, dropped or merged by behavior
//              (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous) and invert,
//              as `tokenizers`' NormalizedString::split does, empty matches included. The
//              usual file, one Isolated pattern that cannot match empty text, splits through
//              tiktoken's Pretokenizer; other pipelines through this file's matcher (same
//              compile options, one per-thread match state for all their patterns).
//   ByteLevel  add_prefix_space puts " " before each piece that does not start with one;
//              use_regex splits with GPT-2's pattern. The byte-to-character mapping itself
//              is implicit: Kiln's BPE works on bytes (hf_bpe.h).
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/tokenizer/hf_tokenizer_json.h"
#include "kiln/data/tokenizer/pretokenizer.h"

namespace kiln::data::hf {

// GPT-2's split pattern, ByteLevel's when use_regex is set.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  // Fails (invalid_argument) when a pattern does not compile; the caller adds the file.
  static Result<std::unique_ptr<PreTokenizer>> compile(const std::vector<PreTokenizerStep>& steps);
  ~PreTokenizer();

  // Calls `piece` with each non-empty piece of `text`, in order. Thread-safe.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

 private:
  struct Step {
    PreTokenizerStep spec;
    std::unique_ptr<Pretokenizer> isolated;  // the one pattern of a usual file
    void* flagged = nullptr;                 // else the pattern's pcre2_code*
  };
  void run(size_t step, std::string_view text, const std::function<void(std::string_view)>& piece) const;
  void split_flagged(const Step& step, std::string_view text,
                     const std::function<void(std::string_view)>& piece) const;
  std::vector<Step> steps_;
};

}  // namespace kiln::data::hf
