// A Hugging Face GPT-OSS directory: config.json, model.safetensors.index.json and the
// safetensors files it names (MXFP4 expert blocks and scales included), cut from one input
// by fuzz_files.h's separators, taken through `kiln convert --from hf`'s reading half:
// plan_hf_import (config, index, every header, the tensor plan, the Kiln config) and then
// every planned tensor produced.
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
  for (const KilnFromHf& t : plan->tensors) (void)plan->checkpoint.produce(t);
  return 0;
}
