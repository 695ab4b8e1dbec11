// A text corpus file (dataset_type=text): the first byte picks the format the file name
// selects, plain text (paragraphs, fortune-file '%' lines) or JSONL (objects with "text"),
// and the rest is the file read by read_documents.
#include "kiln/data/corpus.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  if (size == 0) return 0;
  const std::string dir = kiln::fuzz::fresh_dir("corpus");
  const char* name = (data[0] & 1) ? "docs.jsonl" : "docs.txt";
  const std::string path = kiln::fuzz::write_file(dir, name, {reinterpret_cast<const char*>(data) + 1, size - 1});
  (void)kiln::data::read_documents(path);
  return 0;
}
