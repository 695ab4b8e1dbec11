// tokenizer_type=tiktoken: OpenAI's byte-level BPE encodings, read from the .tiktoken rank
// files OpenAI publishes (tiktoken_file.h); pattern and special tokens from Kiln's table of
// known encodings (tiktoken_encodings.h). Nothing is downloaded (docs/data.md).
//
// tokenizer_path is one of
//   o200k_harmony  GPT-OSS's: o200k_base's ranks and pattern plus the harmony special tokens
//                  (<|startoftext|> 199998 ... <|call|> 200012, <|reserved_*|> to 201087);
//                  vocab 201,088, BOS <|startoftext|>, EOS <|endoftext|> 199999
//   o200k_base, cl100k_base, p50k_base, p50k_edit, r50k_base, gpt2: as in tiktoken
//     (a name: the file is looked up in the tokenizer directory: tokenizer_dir, else
//     $KILN_TOKENIZER_DIR, else ${XDG_CACHE_HOME:-~/.cache}/kiln/tiktoken)
//   PATH.tiktoken  a published rank file, named by its encoding or known by its sha256 (so a
//                  file in tiktoken's own download cache works too)
//   PATH.json      an encoding of one's own: pat_str, special_tokens and bpe_ranks
// A known file's sha256 must be the published one.
//
// Special tokens: encode() treats their text as ordinary text (ids of "<", "|", ...), so a
// document that quotes "<|endoftext|>" cannot inject a control token into training data.
// Options::allowed_special turns recognition on (tiktoken's allowed_special); decode()
// writes a special token as its text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/tokenizer.h"
#include "kiln/data/tokenizer/bpe.h"
#include "kiln/data/tokenizer/pretokenizer.h"

namespace kiln::data {

// Where encoder files are looked up by name.
std::string tiktoken_encoders_dir();

class TiktokenTokenizer final : public Tokenizer {
 public:
  struct Options {
    // Special tokens recognised in text: none (default), the listed ones, or "all".
    std::vector<std::string> allowed_special;
    // The tokenizer directory for encoding names (tokenizer_dir; "" = the default lookup).
    std::string directory;
  };
  static Result<std::unique_ptr<TiktokenTokenizer>> load(const std::string& name_or_path, Options options = {});

  std::string name() const override { return "tiktoken:" + encoding_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  // Special tokens written as their text; an id outside the vocabulary (or a hole in it,
  // such as o200k_base's 200000) is invalid_argument.
  Result<std::string> decode(const std::vector<int32_t>& ids) const override;

  // Never recognises special tokens (tiktoken's encode_ordinary).
  std::vector<int32_t> encode_ordinary(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }
  bool jit() const { return pretokenizer_->jit(); }
  int32_t special_id(const std::string& text) const;  // -1: not a special token

 private:
  TiktokenTokenizer() = default;
  static Result<std::unique_ptr<TiktokenTokenizer>> build(const std::string& key, const std::string& encoding,
                                                         const std::string& pattern,
                                                         std::vector<std::pair<std::string, int32_t>> tokens,
                                                         const std::vector<std::pair<std::string, int32_t>>& specials,
                                                         const Options& options);
  void encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const;
  // The first allowed special token at or after `from`: {position, length, id}; npos if none.
  struct SpecialMatch {
    size_t pos, length;
    int32_t id;
  };
  SpecialMatch next_special(std::string_view text, size_t from) const;

  std::string encoding_, pattern_;
  std::unique_ptr<Pretokenizer> pretokenizer_;
  bpe::RankTable ranks_;
  std::vector<std::string> decoder_;  // id -> bytes ("" with known_[id] = 0: a hole)
  std::vector<uint8_t> known_;
  std::unordered_map<std::string, int32_t> special_;
  std::vector<uint8_t> allowed_;         // by id: recognised in encode()
  std::vector<size_t> special_lengths_;  // distinct lengths of allowed specials, longest first
  bool any_allowed_ = false;
  uint8_t special_first_[256] = {};  // first bytes of allowed specials
  int64_t vocab_size_ = 0;
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace kiln::data
