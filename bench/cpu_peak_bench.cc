// This CPU's arithmetic peaks, measured by the same code the trainer uses for MFU when
// hardware_peak_tflops = 0 (backend/cpu/gemm/cpu_peak.h): each dtype's fastest unit (f32: FMA;
// bf16: AMX tiles, AVX-512 dot products or else FMA) per second of CPU time, and the memory
// bandwidth, on 1 thread and on every core at once. KILN_CPU_ISA=avx512 / avx2 measures the
// fallbacks on a CPU that has more.
//
//   build/bench/cpu_peak_bench [seconds_per_kind=0.5]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kiln/backend/cpu/gemm/cpu_peak.h"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::max(0.02, std::atof(argv[1])) : 0.5;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  using kiln::backend::cpu::measure_cpu_peak;
  const auto one = measure_cpu_peak(1, seconds);
  const auto all = measure_cpu_peak(cores, seconds);
  std::printf("arithmetic peak of %s, TFLOP per second of CPU time (not wall time)\n", all.cpu_model.c_str());
  std::printf("%-34s %10s %12s\n", "kind", "1 thread", "all threads");
  std::printf("%-34s %10.3f %12.3f  %s\n", "f32 peak", one.f32_tflops, all.f32_tflops, all.f32_unit.c_str());
  std::printf("%-34s %10.3f %12.3f  %s\n", "bf16 peak", one.bf16_tflops, all.bf16_tflops, all.bf16_unit.c_str());
  std::printf("%-34s %10.1f %12.1f  triad, wall time\n", "memory GB/s", one.memory_gbs, all.memory_gbs);
  std::printf("units: %s%s%s\n", all.isa.c_str(), all.amx_note.empty() ? "" : "; ", all.amx_note.c_str());
  std::printf("all threads = %d; bf16 / f32 = %.2f; kiln train measures this itself (hardware_peak_tflops=0)\n", cores,
              all.bf16_tflops / all.f32_tflops);
  std::printf("reproduce: build/bench/cpu_peak_bench %g\n", seconds);
  return 0;
}
