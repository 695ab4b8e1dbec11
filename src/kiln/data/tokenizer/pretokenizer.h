// The pre-tokenizer: splits text into the pieces that BPE encodes one by one, with the
// encoding's split pattern (`pat_str`) compiled by PCRE2 in UTF + UCP mode (\p{L}, \s and
// friends follow Unicode properties, as in tiktoken's regex engine), JIT-compiled when the
// library supports it.
//
// Bytes that are not valid UTF-8 can never match the pattern (PCRE2_MATCH_INVALID_UTF);
// they come back as pieces of their own, so every input byte lands in exactly one piece and
// decoding gives the input back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/base/status.h"

namespace kiln::data {

class Pretokenizer {
 public:
  // Fails (invalid_argument) when the pattern does not compile, naming the offset.
  static Result<std::unique_ptr<Pretokenizer>> compile(const std::string& pattern);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls `piece` with each piece of `text`, in order; the pieces tile the text. Thread-safe.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;
  bool jit() const { return jit_; }

 private:
  Pretokenizer() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  uint64_t id_ = 0;  // unique per pattern: keys the per-thread match state
};

}  // namespace kiln::data
