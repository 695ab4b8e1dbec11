// A Hugging Face model directory (any family of hf_family.h): config.json,
// model.safetensors.index.json and the safetensors files it names (MXFP4 expert blocks and
// scales, per-expert tensors stacked), cut from one input by fuzz_files.h's separators, taken
// through `kiln convert --from hf`'s reading half: plan_hf_import (config, index, every
// header, the tensor plan, the Kiln config) and every planned tensor produced; then the
// per-device reader a sharded start uses (load_parameters_path=HF_DIR): produce_block of the
// halves of each tensor along its first and its last dimension.
#include "kiln/checkpoint/hf_import.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::checkpoint;
  const std::string dir = kiln::fuzz::fresh_dir("hf_dir");
  for (const auto& [name, bytes] : kiln::fuzz::split_files({reinterpret_cast<const char*>(data), size}, "config.json")) {
    kiln::fuzz::write_file(dir, name, bytes);
  }
  kiln::Result<HfImportPlan> plan = plan_hf_import(dir);
  if (!plan.ok()) return 0;
  for (const KilnFromHf& t : plan->tensors) {
    (void)plan->checkpoint.produce(t);
    const std::vector<int64_t>& dims = t.shape.dims();
    if (dims.empty()) continue;
    for (size_t axis : {size_t{0}, dims.size() - 1}) {
      if (dims[axis] < 2) continue;
      for (int64_t half = 0; half < 2; ++half) {
        Region block{std::vector<int64_t>(dims.size(), 0), dims};
        block.dims[axis] = dims[axis] / 2;
        block.offset[axis] = half * (dims[axis] / 2);
        (void)plan->checkpoint.produce_block(t, block);
      }
    }
  }
  return 0;
}
