// A .npy file of token ids (`kiln forward --ids FILE.npy`): magic, version, header dict
// (descr, fortran_order, shape) and data, read by read_npy_ids.
#include "apps/npy.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string dir = kiln::fuzz::fresh_dir("npy");
  const std::string path = kiln::fuzz::write_file(dir, "ids.npy", {reinterpret_cast<const char*>(data), size});
  (void)kiln::app::read_npy_ids(path);
  return 0;
}
