// A checkpoint step directory as a whole: manifest.json and its shard files (the input cut
// by fuzz_files.h's separators), opened as a restore opens it and read every way a run
// reads it: each tensor whole, each device's shard on the saved mesh (whole pieces, then
// partial reads), each tensor resharded over two devices, and checkpoint::load.
#include "kiln/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::checkpoint;
  const std::string dir = kiln::fuzz::fresh_dir("checkpoint_dir/7");
  for (const auto& [name, bytes] : kiln::fuzz::split_files({reinterpret_cast<const char*>(data), size}, "manifest.json")) {
    kiln::fuzz::write_file(dir, name, bytes);
  }
  kiln::Result<CheckpointReader> reader = CheckpointReader::open(dir);
  if (reader.ok()) {
    const kiln::config::Mesh two{{"fsdp"}, {2}, {1}};
    for (const SavedTensor& t : reader->tensors()) {
      (void)reader->read_global(t.name);
      for (int64_t d = 0; d < reader->mesh().num_devices() && d < 8; ++d) {
        (void)reader->read_shard(t.name, t.shape, t.sharding, reader->mesh(), d);
        (void)reader->read_shard(t.name, t.shape, t.sharding, reader->mesh(), d, {.partial_reads = true});
      }
      if (t.shape.rank() > 0 && t.shape.dims()[0] % 2 == 0) {
        kiln::ir::Sharding split;
        split.dims.assign(t.shape.rank(), {});
        split.dims[0] = {"fsdp"};
        for (int64_t d = 0; d < 2; ++d) (void)reader->read_shard(t.name, t.shape, split, two, d, {.partial_reads = true});
      }
    }
  }
  (void)load(dir);
  return 0;
}
