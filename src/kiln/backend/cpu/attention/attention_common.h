// Pieces shared by the f32 and the bf16 flash-attention kernels (attention_kernels.cc,
// attention_bf16.cc): tile sizes, the op's geometry and masks, the online-softmax row
// operations (float32 whatever the input dtype) and typed element access.
#pragma once

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
// GCC 12 warns of an uninitialized value inside many AVX-512 intrinsics (they pass
// _mm512_undefined_ps() as the masked-off source; GCC bug 105593): not a bug here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "kiln/backend/buffer.h"
#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/ir/instr.h"

namespace kiln::backend::cpu::attention_detail {

using ir::DType;
using ir::Instr;

constexpr int64_t kBq = 64;  // queries per tile
constexpr int64_t kBk = 64;  // keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x) for x <= ~88: 2^n * 2^f with |f| <= 1/2, a degree-6 polynomial for 2^f; exactly 0
// below -87 (and for -inf), so masked entries vanish.
inline float fast_exp(float x) {
  float t = std::max(x, -87.0f) * 1.44269504088896341f;
  float n = std::floor(t + 0.5f);
  float f = (t - n) * 0.693147180559945309f;
  float p = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720))))));
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float r = p * std::bit_cast<float>(bits);
  return x < -87.0f ? 0.0f : r;
}

// Row operations on one 64-wide tile row (kBk entries).
#if defined(__AVX512F__)
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);  // false below -87, for -inf and NaN
  // (a blend rather than _mm512_max_ps, which trips GCC 12's -Wmaybe-uninitialized)
  __m512 t = _mm512_mul_ps(_mm512_mask_blend_ps(keep, lo, x), _mm512_set1_ps(1.44269504088896341f));
  __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147180559945309f));
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  __m512 r = _mm512_scalef_ps(p, n);
  return _mm512_maskz_mov_ps(keep, r);
}
#elif defined(__AVX2__) && defined(__FMA__)
// exp16's method on 8 lanes: 2^n by adding n to the exponent bits (n in [-126, 128) here).
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);  // false below -87, for -inf and NaN
  const __m256 t = _mm256_mul_ps(_mm256_blendv_ps(lo, x, keep), _mm256_set1_ps(1.44269504088896341f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(t, n), _mm256_set1_ps(0.693147180559945309f));
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), keep);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
#endif

// The maximum of a row (exact whatever the order: a tree of vector maxima, where the scalar
// loop the compiler made of a `simd reduction(max)` was one chain of 64 dependent maxss).
inline float row_max(const float* s) {
#if defined(__AVX512F__)
  static_assert(kBk == 64, "four 16-lane loads cover a row");
  const __m512 a = _mm512_max_ps(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16));
  const __m512 b = _mm512_max_ps(_mm512_loadu_ps(s + 32), _mm512_loadu_ps(s + 48));
  return _mm512_reduce_max_ps(_mm512_max_ps(a, b));
#elif defined(__AVX2__) && defined(__FMA__)
  static_assert(kBk == 64, "eight 8-lane loads cover a row");
  __m256 a = _mm256_max_ps(_mm256_loadu_ps(s), _mm256_loadu_ps(s + 8));
  __m256 b = _mm256_max_ps(_mm256_loadu_ps(s + 16), _mm256_loadu_ps(s + 24));
  a = _mm256_max_ps(a, _mm256_max_ps(_mm256_loadu_ps(s + 32), _mm256_loadu_ps(s + 40)));
  b = _mm256_max_ps(b, _mm256_max_ps(_mm256_loadu_ps(s + 48), _mm256_loadu_ps(s + 56)));
  return hmax8(_mm256_max_ps(a, b));
#else
  float m = kNegInf;
  for (int64_t c = 0; c < kBk; ++c) m = std::max(m, s[c]);
  return m;
#endif
}

// s[c] = exp(s[c] - m); returns the sum.
inline float exp_row(float* s, float m) {
#if defined(__AVX512F__)
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int c = 0; c < kBk; c += 16) {
    __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + c), mv));
    _mm512_storeu_ps(s + c, p);
    sum = _mm512_add_ps(sum, p);
  }
  return _mm512_reduce_add_ps(sum);
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum0 = _mm256_setzero_ps(), sum1 = sum0;
  for (int c = 0; c < kBk; c += 16) {
    const __m256 p0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c), mv));
    const __m256 p1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c + 8), mv));
    _mm256_storeu_ps(s + c, p0);
    _mm256_storeu_ps(s + c + 8, p1);
    sum0 = _mm256_add_ps(sum0, p0);
    sum1 = _mm256_add_ps(sum1, p1);
  }
  return hsum8(_mm256_add_ps(sum0, sum1));
#else
  float sum = 0;
  for (int64_t c = 0; c < kBk; ++c) {
    s[c] = fast_exp(s[c] - m);
    sum += s[c];
  }
  return sum;
#endif
}

// s[c] = p = exp(s[c] - lse); dp[c] = p (dp[c] - d).
inline void exp_row_ds(float* s, float* dp, float lse, float d) {
#if defined(__AVX512F__)
  const __m512 lv = _mm512_set1_ps(lse), dv = _mm512_set1_ps(d);
  for (int c = 0; c < kBk; c += 16) {
    __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + c), lv));
    _mm512_storeu_ps(s + c, p);
    _mm512_storeu_ps(dp + c, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + c), dv)));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 lv = _mm256_set1_ps(lse), dv = _mm256_set1_ps(d);
  for (int c = 0; c < kBk; c += 8) {
    const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c), lv));
    _mm256_storeu_ps(s + c, p);
    _mm256_storeu_ps(dp + c, _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp + c), dv)));
  }
#else
  for (int64_t c = 0; c < kBk; ++c) {
    const float p = fast_exp(s[c] - lse);
    s[c] = p;
    dp[c] = p * (dp[c] - d);
  }
#endif
}

// Element access in f32 whatever the stored dtype (f32 or bf16).
struct View {
  const void* data = nullptr;
  bool bf16 = false;
  float operator[](int64_t i) const {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(data)[i]) : static_cast<const float*>(data)[i];
  }
};

inline View view(const Buffer& b) { return {b.data(), b.shape().dtype() == DType::kBF16}; }

// bf16 stores round inline (f32_to_bf16: ir::float_to_bf16_bits' bits), so rows vectorize.
inline void store(Buffer& b, int64_t i, float value) {
  if (b.shape().dtype() == DType::kBF16) {
    b.as<uint16_t>()[i] = f32_to_bf16(value);
  } else {
    b.as<float>()[i] = value;
  }
}

// dst[offset, offset + n) = src * mul, in the buffer's dtype (resolved once per row).
inline void store_row(Buffer& b, int64_t offset, const float* src, int64_t n, float mul) {
  if (b.shape().dtype() == DType::kBF16) {
    uint16_t* d = b.as<uint16_t>() + offset;
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) d[e] = f32_to_bf16(src[e] * mul);
  } else {
    float* d = b.as<float>() + offset;
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) d[e] = src[e] * mul;
  }
}

struct Geometry {
  int64_t B, T, H, Dh, S, K, G;
  float scale;
  bool causal;
  int64_t window;
  int sinks = -1, q_seg = -1, kv_seg = -1, out = -1, lse = -1, dout = -1, dlse = -1;

  Geometry(const Instr& instr, bool grad) {
    const auto& q = instr.operand(0)->shape();
    const auto& k = instr.operand(1)->shape();
    B = q.dim(0), T = q.dim(1), H = q.dim(2), Dh = q.dim(3), S = k.dim(1), K = k.dim(2), G = H / K;
    scale = static_cast<float>(instr.attrs().get_float("scale"));
    causal = instr.attrs().get_int_or("causal", 0) != 0;
    window = instr.attrs().get_int_or("window", 0);
    int n = instr.num_operands();
    int opt = grad ? n - 7 : n - 3;
    int i = 3;
    if (opt == 1 || opt == 3) sinks = i++;
    if (opt >= 2) {
      q_seg = i++;
      kv_seg = i++;
    }
    if (grad) {
      out = i++, lse = i++, dout = i++, dlse = i++;
    }
  }

  // Keys [lo, hi) that any query of [i0, i1) may see (before segments).
  std::pair<int64_t, int64_t> key_range(int64_t i0, int64_t i1) const {
    if (!causal) return {0, S};
    int64_t lo = window > 0 ? std::max<int64_t>(0, i0 - window + 1) : 0;
    return {lo, std::min(S, i1)};
  }
  // Queries [lo, hi) that may see any key of [j0, j1).
  std::pair<int64_t, int64_t> query_range(int64_t j0, int64_t j1) const {
    if (!causal) return {0, T};
    int64_t hi = window > 0 ? std::min(T, j1 - 1 + window) : T;
    return {std::min(j0, T), hi};
  }
  // Whether every pair of the tile is allowed by the causal and window masks.
  bool tile_unmasked(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (!causal) return true;
    if (j1 - 1 > i0) return false;                       // some key after some query
    if (window > 0 && j0 <= i1 - 1 - window) return false;  // some key too old
    return true;
  }
  // Columns [lo, hi) of a key block at j0 (nk keys) that the causal and window masks leave
  // query i: one run, since key j is visible when j <= i (causal) and j > i - window.
  std::pair<int64_t, int64_t> visible_columns(int64_t i, int64_t j0, int64_t nk) const {
    int64_t lo = 0, hi = nk;
    if (causal) hi = std::clamp<int64_t>(i - j0 + 1, 0, nk);
    if (window > 0) lo = std::clamp<int64_t>(i - window + 1 - j0, 0, nk);
    return {lo, std::max(lo, hi)};
  }
};

// Whether every query of [i0, i0 + nq) and every key of [j0, j0 + nk) carry one segment id,
// so that the segment mask leaves the tile alone (the common case: one document per row, or
// a tile inside one document).
inline bool one_segment(const int32_t* qs, int64_t i0, int64_t nq, const int32_t* ks, int64_t j0, int64_t nk) {
  const int32_t id = qs[i0];
  bool same = true;
  for (int64_t r = 0; r < nq; ++r) same &= qs[i0 + r] == id;
  for (int64_t c = 0; c < nk; ++c) same &= ks[j0 + c] == id;
  return same;
}

// Sets disallowed entries of the tile (and the padding columns past nk) to -inf. The causal
// and window masks leave each row one run of visible keys, [c_lo, c_hi); the segment mask
// is applied only when the tile spans more than one segment id.
inline void mask_tile(const Geometry& g, const int32_t* qs, const int32_t* ks, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
               bool positional, float* s) {
  const bool segments = qs && !one_segment(qs, i0, nq, ks, j0, nk);
  for (int64_t r = 0; r < nq; ++r) {
    float* sr = s + r * kBk;
    const int64_t i = i0 + r;
    const auto [c_lo, c_hi] = positional ? g.visible_columns(i, j0, nk) : std::pair<int64_t, int64_t>{0, nk};
#pragma omp simd
    for (int64_t c = 0; c < kBk; ++c) sr[c] = c < c_lo || c >= c_hi ? kNegInf : sr[c];
    if (segments) {
      const int32_t id = qs[i];
#pragma omp simd
      for (int64_t c = 0; c < nk; ++c) sr[c] = ks[j0 + c] == id ? sr[c] : kNegInf;
    }
  }
}

}  // namespace kiln::backend::cpu::attention_detail
