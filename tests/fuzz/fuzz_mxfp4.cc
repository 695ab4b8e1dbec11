// MXFP4 expert weights: a safetensors file holding `w_blocks` (u8 [P..., R, G, 16]) and
// `w_scales` (u8 [P..., R, G]) as OpenAI's checkpoints store them, read by
// read_hf_tensors, which pairs and dequantizes them (shapes, the pair's agreement and every
// scale exponent come from the file).
#include "kiln/checkpoint/mxfp4.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string dir = kiln::fuzz::fresh_dir("mxfp4");
  const std::string path = kiln::fuzz::write_file(dir, "experts.safetensors", {reinterpret_cast<const char*>(data), size});
  (void)kiln::checkpoint::read_hf_tensors({path});
  return 0;
}
