// A .safetensors file (a checkpoint piece or a Hugging Face model file): its 8-byte header
// length, JSON header (dtypes, shapes, data_offsets) and data, read the way every loader
// reads one: the index of its entries, each tensor's bytes, then the whole file as
// literals.
#include "kiln/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::checkpoint;
  const std::string dir = kiln::fuzz::fresh_dir("safetensors");
  const std::string path = kiln::fuzz::write_file(dir, "model.safetensors", {reinterpret_cast<const char*>(data), size});
  kiln::Result<SafetensorsIndex> index = index_safetensors(path);
  if (!index.ok()) return 0;
  for (const std::string& name : index->names) (void)read_tensor_bytes(*index, name);
  (void)read_safetensors(path);
  return 0;
}
