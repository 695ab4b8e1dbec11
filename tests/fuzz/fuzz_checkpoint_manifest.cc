// A checkpoint's manifest.json alone, beside valid shard files (a two-device checkpoint
// written by checkpoint::save when the target starts): the fuzzer mutates only the JSON
// (steps, mesh, tensor shapes, shardings, pieces, regions, checksums) and every tensor the
// manifest names is then read whole and per device, as a restore would.
#include <filesystem>

#include "kiln/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_fixtures.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::checkpoint;
  static const std::string saved = kiln::fuzz::small_checkpoint_dir();  // holds the shards
  const std::string dir = kiln::fuzz::fresh_dir("checkpoint_manifest/3");
  for (const auto& entry : std::filesystem::directory_iterator(saved)) {
    if (entry.path().filename() != "manifest.json") std::filesystem::copy(entry.path(), dir + "/" + entry.path().filename().string());
  }
  kiln::fuzz::write_file(dir, "manifest.json", {reinterpret_cast<const char*>(data), size});
  kiln::Result<CheckpointReader> reader = CheckpointReader::open(dir);
  if (!reader.ok()) return 0;
  for (const SavedTensor& t : reader->tensors()) {
    (void)reader->read_global(t.name);
    for (int64_t d = 0; d < reader->mesh().num_devices() && d < 8; ++d) {
      (void)reader->read_shard(t.name, t.shape, t.sharding, reader->mesh(), d, {.partial_reads = (d % 2) == 1});
    }
  }
  return 0;
}
