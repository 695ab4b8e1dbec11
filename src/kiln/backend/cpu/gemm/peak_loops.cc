// The AVX2 FMA loop and the AMX tile loop (peak_loops.h), built for the project's baseline
// target. The AMX instructions are written as assembly, so this file needs no AMX compiler
// flag and runs on any x86-64 CPU as long as amx_dpbf16 is called only where
// cpu_features().amx_bf16 holds.
#include <immintrin.h>
#include <time.h>

#include <cstdint>
#include <cstring>

#include "kiln/backend/cpu/gemm/peak_loop.h"

namespace kiln::backend::cpu::peak_loops {

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double fma256(double seconds) {
  return loop_rate(_mm256_set1_ps(1e-3f), [](__m256 x, __m256 b, __m256 c) { return _mm256_fmadd_ps(x, b, c); },
                   12 * 8 * 2.0, seconds);
}

namespace {

// The 64-byte tile configuration (palette 1): per tile its bytes per row and its rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

}  // namespace

double amx_dpbf16(double seconds) {
  // tmm0-3: 16 x 16 f32 accumulators; tmm4-5: A, 16 rows x 32 bf16; tmm6-7: B, 16 rows of
  // 16 bf16 pairs (the VNNI layout). Every tile is 16 rows of 64 bytes. Four accumulators
  // from two A and two B tiles keep the unit busy (each tdpbf16ps depends only on its own
  // accumulator).
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& x : operand) x = 0x3c00;  // bf16 2^-7: the sums stay far from overflow
  const void* data = operand;
  const int64_t stride = 64;
  asm volatile("ldtilecfg %0" : : "m"(config));
  asm volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
  asm volatile(
      "tileloadd (%0,%1,1), %%tmm4\n\t"
      "tileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\t"
      "tileloadd (%0,%1,1), %%tmm7" ::"r"(data),
      "r"(stride)
      : "memory");
  constexpr double kFlopsPerIter = 4 * 16.0 * 16.0 * 32.0 * 2.0;
  constexpr int kInner = 10000;
  double flops = 0;
  const double t0 = thread_cpu_seconds();
  double t = t0;
  while (t - t0 < seconds) {
    for (int i = 0; i < kInner; ++i) {
      asm volatile(
          "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
          "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
          "tdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
    }
    flops += kInner * kFlopsPerIter;
    t = thread_cpu_seconds();
  }
  asm volatile("tilerelease" ::);
  return flops / (t - t0) / 1e9;
}

}  // namespace kiln::backend::cpu::peak_loops
