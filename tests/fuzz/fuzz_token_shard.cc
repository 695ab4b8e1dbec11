// One token shard (.bin: header, document offsets, uint16/uint32 tokens) opened as
// dataset_path opens it, then every token of every document read.
#include "kiln/data/shard.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::data;
  const std::string dir = kiln::fuzz::fresh_dir("token_shard");
  const std::string path = kiln::fuzz::write_file(dir, "shard_00000.bin", {reinterpret_cast<const char*>(data), size});
  kiln::Result<std::unique_ptr<Shard>> shard = Shard::open(path);
  if (!shard.ok()) return 0;
  uint64_t sum = 0;
  for (int64_t i = 0; i < (*shard)->num_documents(); ++i) {
    for (int64_t j = 0; j < (*shard)->document_size(i); ++j) sum += (*shard)->token(i, j);
  }
  return static_cast<int>(sum & 0);
}
