// This CPU's arithmetic peaks, measured: the denominator of MFU (hardware_peak_tflops = 0,
// the default) and of the attribution table's "% of peak". Machines of one kind differ by
// more than 2x (a core that runs 512-bit FMAs at full width against one that splits them),
// so no fixed number is right.
//
// Each dtype's peak is its fastest unit on this CPU (cpu_features.h, asked at run time):
//   f32   the faster of the AVX2 and AVX-512 FMA loops
//   bf16  AMX tdpbf16ps where the tile units are usable, else AVX512_BF16 vdpbf16ps, else
//         the f32 peak (an AVX2-only CPU multiplies bf16 as f32)
// Each unit's loop (peak_loops.h) runs on `threads` threads at once for `seconds`. Rates are
// per second of each thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so time the scheduler
// gives other processes does not lower them: on a loaded machine the figure stays the peak
// of the cores. The memory bandwidth beside them (a triad on the same threads, wall time) is
// the roofline of the memory-bound kernels.
#pragma once

#include <string>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"

namespace kiln::backend::cpu {

struct CpuPeak {
  double f32_tflops = 0;   // the faster of the 256- and 512-bit FMA loops, all threads
  double bf16_tflops = 0;  // the fastest bf16 unit; the f32 peak where the CPU has none
  bool bf16_instruction = false;  // false: bf16_tflops is the f32 peak
  std::string f32_unit;    // "AVX-512 FMA" / "AVX2 FMA"
  std::string bf16_unit;   // "AMX tdpbf16ps" / "AVX-512 vdpbf16ps" / "f32 FMA (no bf16 unit)"
  std::string isa;         // cpu_features().isa(): the units the measurement could use
  std::string amx_note;    // why AMX was not measured ("" when it was)
  double memory_gbs = 0;   // triad bandwidth on the same threads (STREAM's byte count)
  int threads = 0;
  std::string cpu_model;   // /proc/cpuinfo's "model name"
  bool from_cache = false;
  double measure_seconds = 0;  // wall time the measurement took (0 when cached)
};

// Measures now.
CpuPeak measure_cpu_peak(int threads, double seconds_per_kind = 0.08);

// The peak for `threads` threads, measured once per CPU model, thread count and units in use
// (CpuPeak::isa, so KILN_CPU_ISA=avx512 on an AMX machine is its own entry) and kept in CACHE_DIR/cpu_peak.json (the kernel cache's folder, KILN_CACHE_DIR or
// ~/.cache/kiln). A cache that cannot be read or written is only a note: the peak is
// measured again.
CpuPeak cached_cpu_peak(int threads, const std::string& cache_dir);

// "0.421 TFLOP/s f32 (AVX-512 FMA), 6.310 TFLOP/s bf16 (AMX tdpbf16ps), memory 34 GB/s
// (measured in 0.41 s on 2 threads of Intel Xeon ...)" or "(... cached ...)"; with the AMX
// note where a CPU has tiles Kiln may not use.
std::string describe(const CpuPeak& peak);

// The peak as the Backend interface gives it (Backend::measure_peaks).
DevicePeaks device_peaks(const CpuPeak& peak);

}  // namespace kiln::backend::cpu
