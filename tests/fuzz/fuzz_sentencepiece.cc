// A SentencePiece model file (tokenizer_type=sentencepiece tokenizer_path=...), loaded and
// used on a fixed text, its ids decoded back.
#include "kiln/data/tokenizer.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::data;
  const std::string dir = kiln::fuzz::fresh_dir("sentencepiece");
  const std::string path = kiln::fuzz::write_file(dir, "fuzz.model", {reinterpret_cast<const char*>(data), size});
  kiln::Result<std::unique_ptr<Tokenizer>> tok = load_sentencepiece(path);
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = (*tok)->encode("Hello, world! 123 \xc3\xa9t\xc3\xa9\n");
  (void)(*tok)->decode(ids);
  (void)(*tok)->decode({-1, static_cast<int32_t>((*tok)->vocab_size()), 0});
  return 0;
}
