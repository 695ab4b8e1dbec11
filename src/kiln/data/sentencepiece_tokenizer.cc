// tokenizer_type=sentencepiece through Debian's libsentencepiece (built only when CMake
// finds it: scripts/setup.sh installs libsentencepiece-dev).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "kiln/data/corpus.h"
#include "kiln/data/sentencepiece_model_check.h"
#include "kiln/data/tokenizer.h"

namespace kiln::data {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    (void)sp_.Encode(std::string(text), &ids);
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  Result<std::string> decode(const std::vector<int32_t>& ids) const override {
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) {
        return invalid_argument("token id {} is outside the SentencePiece vocabulary [0, {})", id, vocab_size());
      }
    }
    std::string text;
    auto st = sp_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!st.ok()) return invalid_argument("SentencePiece decode failed: {}", st.ToString());
    return text;
  }
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

bool sentencepiece_available() { return true; }

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_path) {
  if (model_path.empty()) return invalid_argument("tokenizer_type=sentencepiece needs tokenizer_path=MODEL.model");
  std::error_code ec;
  if (!std::filesystem::exists(model_path, ec)) return not_found("tokenizer_path={}: not found", model_path);
  std::ifstream in(model_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) return io_error("tokenizer_path={}: cannot read the file", model_path);
  const std::string model = bytes.str();
  KILN_RETURN_IF_ERROR(check_sentencepiece_charsmaps(model, model_path));
  auto tok = std::make_unique<SentencePieceTokenizer>();
  sentencepiece::util::Status st;
  // The library throws from its trie builder on some corrupt models (an empty piece).
  try {
    st = tok->sp_.LoadFromSerializedProto(model);
  } catch (const std::exception& e) {
    return invalid_argument("tokenizer_path={}: not a SentencePiece model: {}", model_path, e.what());
  }
  if (!st.ok()) return invalid_argument("tokenizer_path={}: not a SentencePiece model: {}", model_path, st.ToString());
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Status train_sentencepiece(const std::vector<std::string>& inputs, const std::string& model_prefix,
                           int64_t vocab_size) {
  // The trainer reads sentences, one per line: each document on one line.
  std::string sentences = model_prefix + ".sentences.tmp";
  {
    std::ofstream out(sentences);
    for (const std::string& input : inputs) {
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> docs, read_documents(input));
      for (std::string doc : docs) {
        for (char& c : doc) c = c == '\n' ? ' ' : c;
        out << doc << "\n";
      }
    }
    if (!out) return io_error("{}: cannot write", sentences);
  }
  std::string args = "--input=" + sentences + " --model_prefix=" + model_prefix +
                     " --vocab_size=" + std::to_string(vocab_size) +
                     " --model_type=unigram --character_coverage=1.0 --hard_vocab_limit=false"
                     " --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --minloglevel=2";
  auto st = sentencepiece::SentencePieceTrainer::Train(args);
  std::remove(sentences.c_str());
  if (!st.ok()) return invalid_argument("training a SentencePiece model ({}): {}", model_prefix, st.ToString());
  return ok_status();
}

}  // namespace kiln::data
