// This CPU's arithmetic peaks, measured: the denominator of MFU (hardware_peak_tflops = 0,
// the default) and of the attribution table's "% of peak". Machines of one kind differ by
// more than 2x (a core that runs 512-bit FMAs at full width against one that splits them),
// so no fixed number is right.
//
// Each kind (f32 FMA at 256 and 512 bits, bf16 dot product) runs one loop of 12 independent
// vector operations per thread on `threads` threads at once, for `seconds` each. Rates are
// per second of each thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so time the scheduler
// gives other processes does not lower them: on a loaded machine the figure stays the peak
// of the cores. FLOPs: an FMA lane is 2, a bf16 dot-product lane (two products summed into
// f32) is 4.
#pragma once

#include <string>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"

namespace kiln::backend::cpu {

struct CpuPeak {
  double f32_tflops = 0;   // the faster of the 256- and 512-bit FMA loops, all threads
  double bf16_tflops = 0;  // bf16 dot products (vdpbf16ps); the f32 peak where the CPU has none
  bool bf16_instruction = false;  // false: bf16_tflops is the f32 peak
  int threads = 0;
  std::string cpu_model;   // /proc/cpuinfo's "model name"
  bool from_cache = false;
  double measure_seconds = 0;  // wall time the measurement took (0 when cached)
};

// Measures now.
CpuPeak measure_cpu_peak(int threads, double seconds_per_kind = 0.08);

// The peak for `threads` threads, measured once per CPU model, thread count and instruction
// set and kept in CACHE_DIR/cpu_peak.json (the kernel cache's folder, KILN_CACHE_DIR or
// ~/.cache/kiln). A cache that cannot be read or written is only a note: the peak is
// measured again.
CpuPeak cached_cpu_peak(int threads, const std::string& cache_dir);

// "0.534 TFLOP/s f32, 1.02 TFLOP/s bf16 (measured on 2 threads of AMD EPYC ..., 0.3 s)" or
// "(... cached ...)".
std::string describe(const CpuPeak& peak);

// The peak as the Backend interface gives it (Backend::measure_peaks).
DevicePeaks device_peaks(const CpuPeak& peak);

}  // namespace kiln::backend::cpu
