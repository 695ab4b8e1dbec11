// This CPU's arithmetic peaks, measured by the same code the trainer uses for MFU when
// hardware_peak_tflops = 0 (backend/cpu/gemm/cpu_peak.h): f32 FMA and bf16 dot-product rates per
// second of CPU time, on 1 thread and on every core at once.
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
  std::printf("%-34s %10.3f %12.3f\n", "f32 FMA (best of 256/512-bit)", one.f32_tflops, all.f32_tflops);
  std::printf("%-34s %10.3f %12.3f%s\n", "bf16 dot product (vdpbf16ps)", one.bf16_tflops, all.bf16_tflops,
              all.bf16_instruction ? "" : "  (no bf16 instruction: the f32 peak)");
  std::printf("all threads = %d; bf16 / f32 = %.2f; kiln train measures this itself (hardware_peak_tflops=0)\n", cores,
              all.bf16_tflops / all.f32_tflops);
  std::printf("reproduce: build/bench/cpu_peak_bench %g\n", seconds);
  return 0;
}
