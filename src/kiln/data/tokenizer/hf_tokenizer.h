// tokenizer_type=huggingface: a Hugging Face tokenizer.json with a byte-level BPE model (the
// kind GPT-2, Llama 3, Qwen2/3, DeepSeek and GPT-OSS-era files hold), read from disk
// (tokenizer_path = the file, or a directory that holds tokenizer.json; nothing is
// downloaded). What the file may contain and what is refused: hf_tokenizer_json.h.
//
// encode() gives the ids of `tokenizers`' encode(text, add_special_tokens=False): added
// tokens (special or not) that occur in the text ARE recognised, as `tokenizers` does
// whatever add_special_tokens says; the post-processor's BOS/EOS are not added (bos_id()
// and eos_id() are its single-sequence tokens, -1 when it has none; the input pipeline adds
// them). The steps, each as `tokenizers` does it:
//   1. added tokens with normalized=false are found in the raw text (hf_added_tokens.h);
//   2. the text between them is normalized (NFC or nothing), and added tokens with
//      normalized=true are found in that;
//   3. the rest is pre-tokenized (hf_pretokenizer.h) and each piece is merged (hf_bpe.h).
// Bytes that are not UTF-8 (which `tokenizers` cannot take) are pieces of their own, as in
// the tiktoken tokenizer, so decode(encode(text)) is the text unless the file itself changes
// it (NFC, add_prefix_space, a Removed split).
//
// decode() writes every token, special ones included (`tokenizers`' decode with
// skip_special_tokens=False), through the ByteLevel decoder; it returns the bytes as they
// are, where `tokenizers` would replace invalid UTF-8 with U+FFFD. An id that is neither a
// vocabulary nor an added token is invalid_argument.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/data/tokenizer.h"
#include "kiln/data/tokenizer/hf_added_tokens.h"
#include "kiln/data/tokenizer/hf_bpe.h"
#include "kiln/data/tokenizer/hf_pretokenizer.h"

namespace kiln::data {

class HfTokenizer final : public Tokenizer {
 public:
  // `path`: a tokenizer.json file, or a directory that holds one.
  static Result<std::unique_ptr<HfTokenizer>> load(const std::string& path);
  // From the text of a tokenizer.json; `file` names it in errors.
  static Result<std::unique_ptr<HfTokenizer>> from_json(const std::string& file, const std::string& text);

  std::string name() const override { return "huggingface:" + file_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  Result<std::string> decode(const std::vector<int32_t>& ids) const override;

 private:
  HfTokenizer() = default;
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;  // between raw added tokens
  void encode_pieces(std::string_view text, std::vector<int32_t>& out) const;   // normalized, no added tokens

  std::string file_;
  bool nfc_ = false;
  hf::BpeModel bpe_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  hf::AddedTokenMatcher raw_added_, normalized_added_;
  std::vector<std::string> decoder_;  // id -> bytes
  std::vector<uint8_t> known_;        // id -> is a token (vocabulary ids may have holes)
  int64_t vocab_size_ = 0;
  int32_t bos_ = -1, eos_ = -1;
};

}  // namespace kiln::data
