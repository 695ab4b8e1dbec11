// The .tiktoken format that OpenAI publishes and tiktoken reads: one mergeable token per
// line, "BASE64(token) RANK", with no special tokens (those come from the encoding's table).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::data {

// Parses the text of a .tiktoken file; `file` names it in errors, which are one line:
// "FILE:LINE: expected ... got ...". Ranks must be distinct and non-negative, tokens
// distinct and non-empty.
Result<std::vector<std::pair<std::string, int32_t>>> parse_tiktoken_ranks(std::string_view text,
                                                                          const std::string& file);

// Standard or URL-safe base64, padding optional; false on any other character.
bool decode_base64(std::string_view in, std::string& out);

}  // namespace kiln::data
