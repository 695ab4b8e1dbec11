#include "kiln/data/tokenizer/hf_regex.h"

#include <cctype>
#include <vector>

namespace kiln::data::hf {

namespace {

// Oniguruma's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, and from
// its Latin-1 table the superscripts 2, 3, 1 and the fractions 1/4, 1/2, 3/4 (measured
// against `tokenizers` over every assigned code point).
constexpr std::string_view kWordClass = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";

size_t utf8_length(unsigned char b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

bool is_hex4(std::string_view s) {
  if (s.size() < 4) return false;
  for (size_t k = 0; k < 4; ++k) {
    if (!std::isxdigit(static_cast<unsigned char>(s[k]))) return false;
  }
  return true;
}

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  Result<std::string> run() {
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\') {
        atom_ = out_.size();
        KILN_RETURN_IF_ERROR(escape(/*in_class=*/false));
      } else if (c == '[') {
        atom_ = out_.size();
        KILN_RETURN_IF_ERROR(char_class());
      } else if (c == '(') {
        group();
      } else if (c == ')') {
        if (groups_.empty()) return invalid_argument("split pattern has an unbalanced ) at offset {}", i_);
        atom_ = groups_.back();
        groups_.pop_back();
        out_ += ')';
        ++i_;
      } else if (c == '{') {
        KILN_RETURN_IF_ERROR(interval());
      } else if (c == '^' || c == '$') {
        anchors_ = true;
        atom_ = std::string::npos;
        out_ += c;
        ++i_;
      } else if (c == '|') {
        atom_ = std::string::npos;
        out_ += c;
        ++i_;
      } else if (c == '*' || c == '+' || c == '?') {
        out_ += c;  // a quantifier, or the possessive/lazy mark after one: the same in both
        ++i_;
      } else {
        atom_ = out_.size();
        copy_char();
      }
    }
    if (!groups_.empty()) return invalid_argument("split pattern has an unclosed (");
    // Ruby's ^ and $ are always line anchors; PCRE2's are with (?m).
    return anchors_ ? "(?m)" + out_ : out_;
  }

 private:
  void copy_char() {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(p_[i_])), p_.size() - i_);
    out_.append(p_.substr(i_, n));
    i_ += n;
  }

  // p_[i_] is a backslash.
  Status escape(bool in_class) {
    if (i_ + 1 >= p_.size()) return invalid_argument("split pattern ends with a backslash");
    const char e = p_[i_ + 1];
    if ((e == 'H' || e == 'W') && in_class) {
      return invalid_argument("split pattern uses \\{} inside a character class (offset {}), which Kiln cannot "
                              "translate to PCRE2",
                              e, i_);
    }
    const std::string word(kWordClass), w = "[" + word + "]";
    std::string with;  // Oniguruma's meaning in PCRE2, for the escapes the two read differently
    switch (e) {
      case 'h': with = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
      case 'H': with = "[^0-9a-fA-F]"; break;
      case 's': with = "\\p{White_Space}"; break;
      case 'S': with = "\\P{White_Space}"; break;
      case 'w': with = in_class ? word : w; break;
      case 'W': with = "[^" + word + "]"; break;
      case 'b':  // a word boundary by that \w (in a class, \b is a backspace in both)
        if (!in_class) with = "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
        break;
      case 'B':
        if (!in_class) with = "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
        break;
      default: break;
    }
    if (!with.empty()) {
      out_ += with;
      i_ += 2;
      if (e == 'b' || e == 'B') atom_ = std::string::npos;  // an assertion, nothing to repeat
      return ok_status();
    }
    if (e == 'u' && is_hex4(p_.substr(i_ + 2))) {
      out_ += "\\x{" + std::string(p_.substr(i_ + 2, 4)) + "}";
      i_ += 6;
      return ok_status();
    }
    // \p{..}, \x{..}, \k<..>, \g<..>: copied through the closing bracket.
    if (i_ + 2 < p_.size() && (p_[i_ + 2] == '{' || p_[i_ + 2] == '<') &&
        (e == 'p' || e == 'P' || e == 'x' || e == 'k' || e == 'g')) {
      const size_t close = p_.find(p_[i_ + 2] == '{' ? '}' : '>', i_ + 3);
      if (close == std::string_view::npos) return invalid_argument("split pattern has an unclosed \\{}", e);
      out_.append(p_.substr(i_, close + 1 - i_));
      i_ = close + 1;
      return ok_status();
    }
    out_ += '\\';
    ++i_;
    copy_char();
    return ok_status();
  }

  // p_[i_] is '['.
  Status char_class() {
    const size_t start = i_;
    out_ += '[';
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') out_ += p_[i_++];
    if (i_ < p_.size() && p_[i_] == ']') {  // a leading ] is a literal one
      out_ += "\\]";
      ++i_;
    }
    while (i_ < p_.size() && p_[i_] != ']') {
      if (p_[i_] == '\\') {
        KILN_RETURN_IF_ERROR(escape(/*in_class=*/true));
      } else if (p_[i_] == '[') {
        if (p_.substr(i_, 2) != "[:") {
          return invalid_argument("split pattern nests a character class (offset {}), which PCRE2 cannot", i_);
        }
        const size_t close = p_.find(":]", i_ + 2);
        if (close == std::string_view::npos) return invalid_argument("split pattern has an unclosed [: at {}", i_);
        out_.append(p_.substr(i_, close + 2 - i_));
        i_ = close + 2;
      } else if (p_.substr(i_, 2) == "&&") {
        return invalid_argument("split pattern intersects character classes (&& at offset {}), which PCRE2 cannot", i_);
      } else {
        copy_char();
      }
    }
    if (i_ >= p_.size()) return invalid_argument("split pattern has an unclosed [ at offset {}", start);
    out_ += ']';
    ++i_;
    return ok_status();
  }

  // p_[i_] is '('.
  void group() {
    groups_.push_back(out_.size());
    out_ += '(';
    ++i_;
    if (i_ >= p_.size() || p_[i_] != '?') return;
    // Option settings "(?imx-imx)" or "(?imx-imx:": Ruby's m is PCRE2's s.
    size_t k = i_ + 1;
    while (k < p_.size() && (std::isalpha(static_cast<unsigned char>(p_[k])) || p_[k] == '-')) ++k;
    if (k == i_ + 1 || k >= p_.size() || (p_[k] != ')' && p_[k] != ':')) return;  // (?=, (?<name>, ...
    out_ += '?';
    for (size_t j = i_ + 1; j < k; ++j) out_ += p_[j] == 'm' ? 's' : p_[j];
    i_ = k;
    if (p_[k] == ')') {  // an option setting, not a group
      out_ += ')';
      ++i_;
      groups_.pop_back();
      atom_ = std::string::npos;
    }
  }

  // p_[i_] is '{': an interval quantifier ({n}, {n,}, {n,m}, {,m}) or a literal brace.
  Status interval() {
    size_t k = i_ + 1;
    auto digits = [&] {
      const size_t from = k;
      while (k < p_.size() && std::isdigit(static_cast<unsigned char>(p_[k]))) ++k;
      return std::string(p_.substr(from, k - from));
    };
    const std::string low = digits();
    const bool comma = k < p_.size() && p_[k] == ',';
    if (comma) ++k;
    const std::string high = comma ? digits() : "";
    if (k >= p_.size() || p_[k] != '}' || (low.empty() && high.empty())) {
      atom_ = out_.size();
      out_ += "\\{";
      ++i_;
      return ok_status();
    }
    const std::string q = "{" + (low.empty() ? "0" : low) + (comma ? "," : "") + high + "}";
    i_ = k + 1;
    if (i_ < p_.size() && p_[i_] == '+') {
      // Ruby: X{n,m}+ repeats X{n,m}; PCRE2 would read it as possessive.
      if (atom_ == std::string::npos) return invalid_argument("split pattern has a quantifier without an operand");
      out_.insert(atom_, "(?:");
      out_ += q + ")+";
      ++i_;
    } else {
      out_ += q;
    }
    return ok_status();
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string out_;
  std::vector<size_t> groups_;         // where each open group starts in out_
  size_t atom_ = std::string::npos;    // where the last atom starts in out_
  bool anchors_ = false;
};

}  // namespace

Result<std::string> onig_to_pcre2(std::string_view pattern) { return Translator(pattern).run(); }

}  // namespace kiln::data::hf
