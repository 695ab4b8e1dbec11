#include "kiln/data/tokenizer/tiktoken_file.h"

#include <charconv>
#include <unordered_set>

#include <fmt/format.h>

namespace kiln::data {

namespace {

// A line quoted in an error: printable ASCII, at most 60 characters.
std::string excerpt(std::string_view line) {
  std::string out;
  for (char c : line.substr(0, 60)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (line.size() > 60) out += "...";
  return out;
}

}  // namespace

bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size(); ++i) {
    const char c = in[i];
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else if (c == '=') break;
    else return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  for (; i < in.size(); ++i) {
    if (in[i] != '=') return false;  // padding ends the token
  }
  return true;
}

Result<std::vector<std::pair<std::string, int32_t>>> parse_tiktoken_ranks(std::string_view text,
                                                                          const std::string& file) {
  std::vector<std::pair<std::string, int32_t>> tokens;
  tokens.reserve(text.size() / 12);
  std::unordered_set<int32_t> ranks;
  std::unordered_set<std::string> seen;
  ranks.reserve(text.size() / 12);
  seen.reserve(text.size() / 12);
  const char* const expected = "expected \"BASE64TOKEN RANK\" (one token and its rank per line)";
  size_t pos = 0;
  int64_t line_number = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // tiktoken skips blank lines too
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0) {
      return invalid_argument("{}:{}: {}, got \"{}\"", file, line_number, expected, excerpt(line));
    }
    std::string_view token = line.substr(0, space), rank_text = line.substr(space + 1);
    int64_t rank = -1;
    auto [rank_end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || rank_end != rank_text.data() + rank_text.size() || rank < 0 || rank > INT32_MAX - 1) {
      return invalid_argument("{}:{}: {}; the rank \"{}\" is not an integer in [0, 2^31-1)", file, line_number, expected,
                              excerpt(rank_text));
    }
    if (!decode_base64(token, bytes) || bytes.empty()) {
      return invalid_argument("{}:{}: {}; the token \"{}\" is not base64", file, line_number, expected, excerpt(token));
    }
    if (!ranks.insert(static_cast<int32_t>(rank)).second) {
      return invalid_argument("{}:{}: rank {} appears twice (each rank names one token)", file, line_number, rank);
    }
    if (!seen.insert(bytes).second) {
      return invalid_argument("{}:{}: token \"{}\" appears twice (each token has one rank)", file, line_number,
                              excerpt(token));
    }
    tokens.push_back({bytes, static_cast<int32_t>(rank)});
  }
  if (tokens.empty()) return invalid_argument("{}: holds no tokens; {}", file, expected);
  return tokens;
}

}  // namespace kiln::data
