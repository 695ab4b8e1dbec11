// tokenizer.json split patterns are Oniguruma patterns in Ruby syntax (`tokenizers` compiles
// them with the onig crate); Kiln runs them on PCRE2. The two read the patterns these files
// use (\p{L}, \p{N}, (?i:...), lookahead, possessive *+ ++ ?+) alike, except for a few
// constructs, which onig_to_pcre2 rewrites into PCRE2 with Oniguruma's meaning:
//   X{n,m}+  a greedy repeat of X{n,m} in Ruby syntax (possessive in PCRE2): (?:X{n,m})+ .
//            tiktoken's cl100k_base pattern has \p{N}{1,3}+, which Oniguruma reads as
//            "one or more digits" (one piece for 1234567) and tiktoken as "up to 3".
//   X{,m}    X{0,m}
//   \h \H    a hex digit / not one (horizontal space in PCRE2)
//   \s \S    Unicode White_Space (PCRE2's \s adds U+180E)
//   \w \W    Alphabetic, marks, decimal digits, connector punctuation and six Latin-1
//            numbers (PCRE2's \w is letters, numbers and "_"); \b \B follow that \w
//   \uHHHH   \x{HHHH}
//   ^ $      at line starts and ends, always (Ruby); the pattern gets PCRE2's (?m)
//   (?m)     Ruby's m is "dot matches newline", PCRE2's s
// Refused (one line naming the construct): \H or \W inside a class, nested classes and class
// intersection (&&), which PCRE2 cannot say.
#pragma once

#include <string>
#include <string_view>

#include "kiln/base/status.h"

namespace kiln::data::hf {

Result<std::string> onig_to_pcre2(std::string_view pattern);

}  // namespace kiln::data::hf
