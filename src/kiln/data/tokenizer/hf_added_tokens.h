// Added tokens (tokenizer.json's added_tokens, special or not) found in text before
// pre-tokenization, as `tokenizers`' AddedVocabulary finds them: leftmost-longest matches
// (an Aho-Corasick automaton there, a byte trie here), non-overlapping, each then checked and
// widened by its flags:
//   single_word  skipped unless no word character (Unicode \w) touches it on either side
//   lstrip       takes the whitespace (Unicode White_Space) before it, back to the previous
//                match at most
//   rstrip       takes the whitespace after it
// A skipped match is not searched again for shorter tokens inside it, as in `tokenizers`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::data::hf {

class AddedTokenMatcher {
 public:
  struct Token {
    std::string text;  // what is matched (not empty)
    int32_t id = -1;
    bool single_word = false, lstrip = false, rstrip = false;
  };
  AddedTokenMatcher();
  // A text added again replaces the earlier token.
  void add(Token token);
  bool empty() const { return tokens_.empty(); }

  // Calls `emit(text, -1)` for the text between tokens and `emit(text, id)` for each token
  // found (its text widened by lstrip/rstrip), in order; empty texts are not emitted.
  void split(std::string_view text, const std::function<void(std::string_view, int32_t)>& emit) const;

 private:
  struct Node {
    int32_t token = -1;                               // index into tokens_ ending here
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node
  };
  // The longest token starting at `pos`: its index, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;

  std::vector<Token> tokens_;
  std::vector<Node> nodes_ = {Node{}};  // nodes_[0] is the root
  int32_t root_child_[256];             // the root's children by byte (-1: none), for the scan
};

}  // namespace kiln::data::hf
