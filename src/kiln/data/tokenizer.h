// Tokenizers, chosen by tokenizer_type / tokenizer_path:
//   bytes: the UTF-8 bytes of the text (ids 0..255) plus BOS = 256 and EOS = 257
//          (vocab 258). Needs no model file, so the pipeline works on any machine.
//   sentencepiece: a SentencePiece model file (tokenizer_path) through Debian's
//          libsentencepiece; train_sentencepiece() trains one on a corpus. Without the
//          library at build time, both are unimplemented errors that say so.
//   tiktoken: OpenAI's byte-level BPE (tokenizer_path=o200k_harmony, o200k_base, cl100k_base,
//          ..., a .tiktoken file or an encoder .json; names looked up in tokenizer_dir),
//          tokenizer/tiktoken.h.
//   huggingface: a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Llama 3,
//          Qwen2/3, GPT-OSS-era files; tokenizer_path = the file or a directory holding
//          tokenizer.json), with ids equal to the `tokenizers` package's encode(text,
//          add_special_tokens=False): added tokens in the text are recognised, BOS/EOS come
//          from the post-processor. Other models, normalizers, pre-tokenizers and decoders
//          are refused. tokenizer/hf_tokenizer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1: none
  virtual int32_t eos_id() const = 0;  // -1: none
  // Text -> ids, without BOS/EOS (the input pipeline adds them).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids -> text; ids outside the vocabulary are invalid_argument. bytes and sentencepiece
  // drop BOS/EOS; tiktoken and huggingface write special tokens as their text.
  virtual Result<std::string> decode(const std::vector<int32_t>& ids) const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257;
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 258; }
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
  std::vector<int32_t> encode(std::string_view text) const override;
  Result<std::string> decode(const std::vector<int32_t>& ids) const override;
};

// tokenizer_type "bytes", "sentencepiece" (path: the .model file) or "tiktoken" (path: an
// encoding name, a .tiktoken file or an encoder .json; `directory`: where names are looked up,
// tokenizer_dir) or "huggingface" (path: a tokenizer.json or a directory holding one);
// anything else invalid_argument.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const std::string& type, const std::string& path,
                                                  const std::string& directory = "");

// SentencePiece (sentencepiece_tokenizer.cc, or sentencepiece_missing.cc without the library).
bool sentencepiece_available();
Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_path);
// Trains a unigram model on the documents of `inputs` (corpus.h's rules, one document per
// sentence): writes MODEL_PREFIX.model and MODEL_PREFIX.vocab; unk 0, BOS 1, EOS 2.
Status train_sentencepiece(const std::vector<std::string>& inputs, const std::string& model_prefix,
                           int64_t vocab_size);

}  // namespace kiln::data
