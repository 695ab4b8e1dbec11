// The tiktoken encodings Kiln knows by name: which published .tiktoken file holds each one's
// mergeable ranks, that file's sha256 as OpenAI publishes it (tiktoken checks the same
// digests), the split pattern and the special tokens. This is the one table of them in Kiln;
// tests/data/tiktoken_test.cc holds it against the PyPI packages tiktoken and openai-harmony.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::data {

struct TiktokenEncoding {
  std::string_view name;    // tokenizer_path=NAME
  std::string_view file;    // the published ranks file, looked up in the tokenizer directory
  std::string_view sha256;  // of that file, as published
  std::string_view pattern; // the pre-tokenizer split (PCRE2 with Unicode properties)
  std::vector<std::pair<std::string, int32_t>> special_tokens;  // text -> id, in table order
};

// All known encodings, in the order error messages list them.
const std::vector<TiktokenEncoding>& tiktoken_encodings();
// nullptr when the name is not known.
const TiktokenEncoding* find_tiktoken_encoding(std::string_view name);
// The first encoding whose published file has this digest (nullptr: none): identifies a
// ranks file given by path, such as one in tiktoken's own download cache.
const TiktokenEncoding* find_tiktoken_encoding_by_sha256(std::string_view sha256);
// "o200k_harmony, o200k_base, ..." for error messages.
std::string tiktoken_encoding_names();

}  // namespace kiln::data
