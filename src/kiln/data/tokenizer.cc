#include "kiln/data/tokenizer.h"

#include "kiln/data/tokenizer/hf_tokenizer.h"
#include "kiln/data/tokenizer/tiktoken.h"

namespace kiln::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

Result<std::string> ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return invalid_argument("token id {} is outside the bytes tokenizer's vocabulary [0, {})", id, vocab_size());
    }
    if (id < 256) text.push_back(static_cast<char>(id));
  }
  return text;
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const std::string& type, const std::string& path,
                                                  const std::string& directory) {
  if (type == "bytes") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (type == "sentencepiece") return load_sentencepiece(path);
  if (type == "tiktoken") {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<TiktokenTokenizer> t, TiktokenTokenizer::load(path, {.directory = directory}));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (type == "huggingface") {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> t, HfTokenizer::load(path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return invalid_argument("tokenizer_type={}: unknown; accepted: bytes, sentencepiece, tiktoken, huggingface", type);
}

}  // namespace kiln::data
