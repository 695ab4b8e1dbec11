// tokenizer_type=sentencepiece when CMake did not find libsentencepiece.
#include "kiln/data/tokenizer.h"

namespace kiln::data {

bool sentencepiece_available() { return false; }

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_path) {
  return unimplemented("tokenizer_type=sentencepiece (tokenizer_path={}): this build has no libsentencepiece; run "
                       "scripts/setup.sh and reconfigure",
                       model_path);
}

Status train_sentencepiece(const std::vector<std::string>&, const std::string&, int64_t) {
  return unimplemented("training a SentencePiece model: this build has no libsentencepiece; run scripts/setup.sh "
                       "and reconfigure");
}

}  // namespace kiln::data
