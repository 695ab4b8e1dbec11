// This CPU's arithmetic peaks, measured: what `hardware_peak_tflops` (MFU and the attribution
// table's "% of peak") should be. An attribution row above 100% of peak means the configured
// peak is below the machine's; this says by how much.
//
//   build/bench/cpu_peak_bench [seconds_per_kind=0.5]
//
// Each kind runs one thread per core, each a loop of 12 independent vector FMAs (or bf16 dot
// products) per iteration, enough to fill two pipelines of 4-cycle latency. Rates are per
// second of the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so time the scheduler gave
// to other processes does not count: on a loaded machine the figures stay the peak of the
// cores, not the share this process got. FLOPs: an FMA lane is 2, a bf16 dot-product lane
// (two products summed into f32) is 4.
//
// Why it matters: the spec's figure (231 GFLOP/s f32 for 2 cores) assumes Zen 4, whose
// 512-bit FMA is two 256-bit halves (32 FLOP/cycle/core). A core that executes 512-bit FMAs
// at full width (Zen 5) has twice that, and oneDNN's sgemm uses them.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace {

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// GFLOP per CPU-second of one thread running `step` (12 vector ops, flops_per_iter FLOPs).
template <class V, class Step>
double loop_rate(V init, Step step, double flops_per_iter, double seconds) {
  // Named accumulators, not an array: an array lives on the stack and every op would go
  // through memory.
  V a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init, a8 = init, a9 = init,
    a10 = init, a11 = init;
  const V b = init, c = init;
  double flops = 0;
  const double t0 = thread_cpu_seconds();
  double t = t0;
  while (t - t0 < seconds) {
    for (int i = 0; i < 1000000; ++i) {
      a0 = step(a0, b, c), a1 = step(a1, b, c), a2 = step(a2, b, c), a3 = step(a3, b, c);
      a4 = step(a4, b, c), a5 = step(a5, b, c), a6 = step(a6, b, c), a7 = step(a7, b, c);
      a8 = step(a8, b, c), a9 = step(a9, b, c), a10 = step(a10, b, c), a11 = step(a11, b, c);
      // Keep every op alive.
      asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
      asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    flops += 1e6 * flops_per_iter;
    t = thread_cpu_seconds();
  }
  return flops / (t - t0) / 1e9;
}

// The loop on every core at once (sum of the per-thread rates).
template <class Fn>
double all_cores(Fn fn, int threads) {
  std::vector<double> rates(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { rates[i] = fn(); });
  for (auto& t : pool) t.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::max(0.05, std::atof(argv[1])) : 0.5;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("arithmetic peak of this CPU, %d cores, GFLOP per second of CPU time (not wall time)\n", cores);
  std::printf("%-38s %12s %12s\n", "kind", "1 core", "all cores");
  struct Kind {
    const char* name;
    double (*one)(double);
  };
  std::vector<Kind> kinds = {
      {"f32 FMA, 256-bit (vfmadd ymm)",
       [](double s) {
         return loop_rate(_mm256_set1_ps(1e-3f), [](__m256 x, __m256 b, __m256 c) { return _mm256_fmadd_ps(x, b, c); },
                          12 * 8 * 2.0, s);
       }},
#ifdef __AVX512F__
      {"f32 FMA, 512-bit (vfmadd zmm)",
       [](double s) {
         return loop_rate(_mm512_set1_ps(1e-3f), [](__m512 x, __m512 b, __m512 c) { return _mm512_fmadd_ps(x, b, c); },
                          12 * 16 * 2.0, s);
       }},
#endif
#if defined(__AVX512BF16__)
      {"bf16 dot product, 512-bit (vdpbf16ps)",
       [](double s) {
         const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
         return loop_rate(_mm512_set1_ps(0.0f),
                          [ones](__m512 x, __m512, __m512) { return _mm512_dpbf16_ps(x, ones, ones); }, 12 * 16 * 4.0,
                          s);
       }},
#endif
  };
  double f32_peak = 0, bf16_peak = 0;
  for (const Kind& k : kinds) {
    const double one = k.one(seconds);
    const double all = all_cores([&] { return k.one(seconds); }, cores);
    std::printf("%-38s %12.1f %12.1f\n", k.name, one, all);
    if (std::string_view(k.name).starts_with("f32")) f32_peak = std::max(f32_peak, all);
    if (std::string_view(k.name).starts_with("bf16")) bf16_peak = all;
  }
  std::printf("f32 peak %.0f GFLOP/s: hardware_peak_tflops=%.3f", f32_peak, f32_peak / 1e3);
  if (bf16_peak > 0) std::printf("; bf16 / f32 = %.2f (attribution.h kBf16PeakFactor)", bf16_peak / f32_peak);
  std::printf("\nreproduce: build/bench/cpu_peak_bench\n");
  return 0;
}
