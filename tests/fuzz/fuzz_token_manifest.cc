// A tokenized dataset directory: manifest.json and the shards it names (cut from one input
// by fuzz_files.h's separators), opened by open_shards as dataset_path=DIR opens it
// (manifest checksums verified, every shard validated).
#include "kiln/data/corpus.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string dir = kiln::fuzz::fresh_dir("token_manifest");
  for (const auto& [name, bytes] : kiln::fuzz::split_files({reinterpret_cast<const char*>(data), size}, "manifest.json")) {
    kiln::fuzz::write_file(dir, name, bytes);
  }
  (void)kiln::data::open_shards(dir);
  (void)kiln::data::open_shards(dir + "/manifest.json");
  return 0;
}
