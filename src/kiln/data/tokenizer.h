// Tokenizers, chosen by tokenizer_type / tokenizer_path:
//   bytes: the UTF-8 bytes of the text (ids 0..255) plus BOS = 256 and EOS = 257
//          (vocab 258). Needs no model file, so the pipeline works on any machine.
// SentencePiece (Debian's libsentencepiece) and tiktoken BPE (o200k_harmony etc.) are not
// built yet; asking for them is an unimplemented error that says so.
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
  // Ids -> text; special ids are dropped, ids outside the vocabulary are invalid_argument.
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

// tokenizer_type "bytes"; anything else is unimplemented (or invalid_argument if unknown).
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const std::string& type, const std::string& path);

}  // namespace kiln::data
