// How the kiln process configures glibc's malloc.
//
// 1. Huge pages. The kiln process runs with glibc's malloc backed by transparent huge pages
// (GLIBC_TUNABLES=glibc.malloc.hugetlb=1: malloc madvises its heap with MADV_HUGEPAGE).
//
// Why: compiling a step allocates hundreds of thousands of small IR objects, and every step
// allocates and frees its kernels' temporaries; on 4 KiB pages each first touch of fresh heap
// is a page fault, and on a virtual machine a page fault is expensive. Measured on the 2-core
// machine (a VM; loaded; same binary, with and without the tunable): a cached `kiln compile`
// of gpt-oss-small at 16 layers 15,600 -> 1,600 minor faults and 0.76 -> 0.53 s CPU; 3 steps of
// `kiln train model_name=gpt-oss-tiny` 80,700 -> 4,000 faults, 3.1 -> 2.3 s CPU, the same peak
// RSS within 1%.
//
// Tunables are read by the dynamic loader when the process starts, so the only way to set
// one for this process is to start it again with the variable set: main() calls this first,
// which re-executes /proc/self/exe once (the variable in the new environment stops a second
// time). KILN_HUGEPAGE_HEAP=0 keeps the default heap; a failed exec just continues.
//
// 2. A fixed mmap threshold. glibc serves blocks from 128 KiB up with mappings of their own,
// but each time such a block is freed it raises that threshold to the block's size (up to
// 32 MiB); blocks below it then come from the heap, whose freed pages stay resident. A
// training process frees large host buffers (collective scratch, the init program's values)
// in its first steps, so its heap kept growing past what the compiled plan counts: 4 MPI
// ranks of 102 M parameters on fsdp 4 peaked 9-14% over their plan, fsdp 2 x expert 2 7-8%.
// With the threshold fixed at 1 MiB (glibc then stops moving it): 5.7-9.6% and 4.3-7.5% in
// two runs (tests/e2e/bigger_than_process_test.py), with the same step time and `kiln
// compile` time.
// MALLOC_MMAP_THRESHOLD_ in the environment still overrides it (glibc reads it first; this
// keeps a value the user set).
//
// 3. A trim threshold of 1 MiB, the mmap threshold. Blocks under the mmap threshold come from
// the heap of the thread's arena, and when a free leaves more than the trim threshold (128 KiB
// by default) unused at the top of a heap, glibc returns those pages (madvise MADV_DONTNEED)
// and the next step faults them in again: gpt-oss-tiny on fsdp 2 (2 device threads) made about
// 65 such calls per step. With the trim threshold at 1 MiB, about 1 per step (12 steps, three
// runs of each alternating: system time 0.50-0.59 -> 0.39-0.42 s, median step 0.382-0.390 ->
// 0.373-0.390 s, peak resident memory over the plan within the runs' spread, +0.4..+2.2%); at
// most 1 MiB per arena stays mapped. MALLOC_TRIM_THRESHOLD_ (or the glibc.malloc.trim_threshold tunable)
// still overrides it.
#include "malloc_settings.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace kiln::app {

void reexec_with_hugepage_heap(char** argv) {
  const char* opt = std::getenv("KILN_HUGEPAGE_HEAP");
  if (opt != nullptr && std::strcmp(opt, "0") == 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::string current = tunables != nullptr ? tunables : "";
  if (current.find("glibc.malloc.hugetlb") != std::string::npos) return;  // set already (or by us)
  std::string wanted = current.empty() ? "glibc.malloc.hugetlb=1" : current + ":glibc.malloc.hugetlb=1";
  if (setenv("GLIBC_TUNABLES", wanted.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: the exec failed; run on the default heap.
  if (tunables != nullptr) {
    setenv("GLIBC_TUNABLES", tunables, 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

namespace {

// Whether the user set this malloc parameter (its environment variable or its tunable).
bool user_set(const char* variable, const char* tunable) {
  if (std::getenv(variable) != nullptr) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, tunable) != nullptr;
}

}  // namespace

void fix_malloc_thresholds() {
  if (!user_set("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold")) mallopt(M_MMAP_THRESHOLD, 1 << 20);
  if (!user_set("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold")) mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

}  // namespace kiln::app
