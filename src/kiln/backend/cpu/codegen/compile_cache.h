// Builds generated kernels into shared objects with the system compiler and loads them.
// Content-addressed: the cache key covers the source, the compiler's identity (its
// --version), the flags and the ISA (-march=native resolves on the machine that compiles,
// and the key includes this machine's CPU model), so a second run compiles nothing. Files
// are written under a temporary name and renamed, so concurrent runs and crashes never leave
// a half-written library. Kernels are split into chunks compiled in parallel.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::backend::cpu {

struct KernelSource {
  std::string name;    // extern "C" symbol
  std::string source;  // one function, without the prelude
};

struct KernelLibrary {
  std::unordered_map<std::string, void*> symbols;
  int64_t chunks_compiled = 0;  // chunks that were not in the cache
  int64_t chunks_total = 0;
};

// dump_dir, when not empty, receives a copy of every chunk's source.
Result<KernelLibrary> build_kernels(const std::vector<KernelSource>& kernels, const std::string& cache_dir,
                                    const std::string& dump_dir);

}  // namespace kiln::backend::cpu
