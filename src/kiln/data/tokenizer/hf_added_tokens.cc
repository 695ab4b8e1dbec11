#define PCRE2_CODE_UNIT_WIDTH 8
#include "kiln/data/tokenizer/hf_added_tokens.h"

#include <pcre2.h>

#include <algorithm>
#include <memory>

#include "kiln/base/check.h"

namespace kiln::data::hf {

namespace {

// One UTF-8 character at text[pos]: its code point and length, or length 0 when the bytes
// there are not UTF-8 (such bytes count as neither word nor space).
struct Char {
  uint32_t cp = 0;
  size_t length = 0;
};

Char char_at(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  size_t n = b0 < 0x80 ? 1 : b0 >= 0xC2 && b0 < 0xE0 ? 2 : b0 >= 0xE0 && b0 < 0xF0 ? 3 : b0 >= 0xF0 && b0 < 0xF5 ? 4 : 0;
  if (n == 0 || pos + n > text.size()) return {};
  uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(text[pos + k]);
    if ((b & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (b & 0x3F);
  }
  const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return {};
  return {cp, n};
}

// The character that ends at `end` (length 0 if none or not UTF-8).
Char char_before(std::string_view text, size_t end) {
  for (size_t n = 1; n <= 4 && n <= end; ++n) {
    const auto b = static_cast<unsigned char>(text[end - n]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the start is further back
    Char c = char_at(text, end - n);
    return c.length == n ? c : Char{};
  }
  return {};
}

// Unicode's White_Space property (Rust regex's \s; a fixed list since Unicode 6.3).
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Rust regex's Unicode \w (UTS #18): Alphabetic, marks, decimal digits, connector punctuation
// and Join_Control, through PCRE2's property tables.
bool is_word(std::string_view text, size_t pos, size_t length) {
  static pcre2_code* const code = [] {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const char* pattern = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])";
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
    KILN_CHECK(c != nullptr) << "PCRE2 cannot compile the word-character class (error " << error << ")";
    return c;
  }();
  thread_local std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data() + pos), length, 0, 0, data.get(), nullptr) >= 0;
}

bool starts_with_word(std::string_view text) {
  if (text.empty()) return false;
  Char c = char_at(text, 0);
  return c.length > 0 && is_word(text, 0, c.length);
}

bool ends_with_word(std::string_view text) {
  Char c = char_before(text, text.size());
  return c.length > 0 && is_word(text, text.size() - c.length, c.length);
}

// Where the whitespace at the end of `text` starts (text.size() when there is none).
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  for (Char c = char_before(text, end); c.length > 0 && is_space(c.cp); c = char_before(text, end)) end -= c.length;
  return end;
}

// Where the whitespace at the start of `text` ends.
size_t leading_space_end(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    Char c = char_at(text, pos);
    if (c.length == 0 || !is_space(c.cp)) break;
    pos += c.length;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher() { std::fill(std::begin(root_child_), std::end(root_child_), -1); }

void AddedTokenMatcher::add(Token token) {
  KILN_CHECK(!token.text.empty());
  int32_t node = 0;
  for (char ch : token.text) {
    const auto b = static_cast<uint8_t>(ch);
    int32_t child = -1;
    for (const auto& [byte, next] : nodes_[static_cast<size_t>(node)].children) {
      if (byte == b) child = next;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[static_cast<size_t>(node)].children.push_back({b, child});
      nodes_.push_back(Node{});
      if (node == 0) root_child_[b] = child;
    }
    node = child;
  }
  int32_t& slot = nodes_[static_cast<size_t>(node)].token;
  if (slot >= 0) {
    tokens_[static_cast<size_t>(slot)] = std::move(token);
  } else {
    slot = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(std::move(token));
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = root_child_[static_cast<uint8_t>(text[pos])];
  int32_t found = -1;
  for (size_t i = pos + 1;; ++i) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    if (n.token >= 0) {
      found = n.token;
      length = i - pos;
    }
    if (i == text.size()) break;
    int32_t next = -1;
    for (const auto& [byte, child] : n.children) {
      if (byte == static_cast<uint8_t>(text[i])) {
        next = child;
        break;
      }
    }
    if (next < 0) break;
    node = next;
  }
  return found;
}

void AddedTokenMatcher::split(std::string_view text,
                              const std::function<void(std::string_view, int32_t)>& emit) const {
  // `tokenizers`' AddedVocabulary::find_matches, line for line: `search` is where the
  // automaton resumes (after the raw match), `done` the end of what was emitted.
  size_t search = 0, done = 0;
  while (search < text.size() && !tokens_.empty()) {
    size_t start = search, length = 0;
    int32_t found = -1;
    for (; start < text.size(); ++start) {
      if (root_child_[static_cast<uint8_t>(text[start])] < 0) continue;
      found = longest_at(text, start, length);
      if (found >= 0) break;
    }
    if (found < 0) break;
    size_t stop = start + length;
    search = stop;
    const Token& token = tokens_[static_cast<size_t>(found)];
    if (token.single_word) {
      const bool space_before = start == 0 || !ends_with_word(text.substr(0, start));
      const bool space_after = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), done);
    if (token.rstrip) stop += leading_space_end(text.substr(stop));
    start = std::min(start, stop);  // only a whitespace token inside the previous one's rstrip
    if (done < start) emit(text.substr(done, start - done), -1);
    emit(text.substr(start, stop - start), token.id);
    done = stop;
  }
  if (done < text.size()) emit(text.substr(done), -1);
}

}  // namespace kiln::data::hf
