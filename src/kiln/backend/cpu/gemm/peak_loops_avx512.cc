// The AVX-512 peak loops (peak_loops.h). This file alone is compiled with -mavx512f
// -mavx512bw -mavx512bf16 (backend/cpu/CMakeLists.txt) whatever the build machine, so one
// binary measures the 512-bit units where they exist; it is called only where
// cpu_features() reports them, and holds nothing another file could link to by accident
// (its template instantiations are in an anonymous namespace).
#include <immintrin.h>

#include "kiln/backend/cpu/gemm/peak_loop.h"

namespace kiln::backend::cpu::peak_loops {

double fma512(double seconds) {
  return loop_rate(_mm512_set1_ps(1e-3f), [](__m512 x, __m512 b, __m512 c) { return _mm512_fmadd_ps(x, b, c); },
                   12 * 16 * 2.0, seconds);
}

double dpbf16(double seconds) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  return loop_rate(_mm512_set1_ps(0.0f), [ones](__m512 x, __m512, __m512) { return _mm512_dpbf16_ps(x, ones, ones); },
                   12 * 16 * 4.0, seconds);
}

}  // namespace kiln::backend::cpu::peak_loops
