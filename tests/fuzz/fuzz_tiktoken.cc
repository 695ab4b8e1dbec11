// A tokenizer file as tokenizer_path names it: the first byte picks a .tiktoken rank file
// (base64 token, space, rank per line; checked against the published digests) or a JSON
// encoder of one's own (pat_str compiled by PCRE2, bpe_ranks, special_tokens); the rest is
// the file. A loaded tokenizer is then used: a fixed text with every kind of character
// encoded, the ids decoded back, and the first ids of the vocabulary decoded.
#include "kiln/data/tokenizer/tiktoken.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::data;
  if (size == 0) return 0;
  const std::string dir = kiln::fuzz::fresh_dir("tiktoken");
  const std::string path = kiln::fuzz::write_file(dir, (data[0] & 1) ? "fuzz.json" : "fuzz.tiktoken",
                                                  {reinterpret_cast<const char*>(data) + 1, size - 1});
  kiln::Result<std::unique_ptr<TiktokenTokenizer>> tok = TiktokenTokenizer::load(path, {.allowed_special = {"all"}});
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = (*tok)->encode("Hello, world! 123 \xc3\xa9t\xc3\xa9  \n\n\tend<|endoftext|>");
  (void)(*tok)->decode(ids);
  std::vector<int32_t> all;
  for (int32_t i = 0; i < (*tok)->vocab_size() && i < 4096; ++i) all.push_back(i);
  (void)(*tok)->decode(all);
  (void)(*tok)->decode({-1, static_cast<int32_t>((*tok)->vocab_size())});
  return 0;
}
