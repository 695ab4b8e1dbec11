// Flash attention on the CPU: the attention and attention_grad ops (ops/attention_ops.cc).
//
// Forward: one task per (batch, query head, block of kBq queries), run by the OpenMP pool.
// A task walks the key blocks its queries can see (causal and sliding-window blocks that
// are fully masked are never visited, so a window W costs O(T * W)), computes the
// kBq x kBk logit tile, and keeps an online softmax per row in float32: the running max
// starts at the sink logit and the running sum at exp(sink - max) = 1, so the sink enters
// the denominator exactly once. Nothing of size T x S is ever stored; the result is the
// output and the per-row log-sum-exp.
//
// Backward (FlashAttention-2): one task per (batch, query head), which owns dq of that head;
// dk and dv (summed over the query heads that share a kv head, GQA) go to per-thread
// accumulators summed at the end. Per (key block, query block) tile it recomputes p = exp(s - lse),
// then dv += p^T dout, dp = dout v^T, ds = p (dp - D) with D = dout . out - dlse,
// dq += ds k and dk += ds^T q. The sink's gradient is -sum p_sink D per head.
//
// Tiles are computed with short loops over a 64-wide block (keys, or the head dim) that
// the compiler vectorizes (AVX-512 with -march=native). Head widths 32, 64 and 128 are
// compile-time constants (the accumulators stay in registers; 64 has hand-written AVX-512
// tiles): with the width known only at run time gpt-oss-tiny's (32) gradient ran 1.9x and its
// forward 1.5x slower (24 kernels per step, one device: 0.244-0.253 vs 0.130-0.132 s and
// 0.090-0.104 vs 0.063 s). Other widths take the run-time loops. exp is a vectorizable polynomial
// (relative error about 2e-7). f32 and bf16 inputs (computed in f32); bf16 q, k, v with
// head dim 64 take the bf16 dot-product kernels instead (attention_bf16.cc) where the CPU
// has AVX512-BF16; f64 falls back to the reference evaluation.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/backend/cpu/attention/attention_bf16.h"
#include "kiln/backend/cpu/attention/attention_common.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/backend/cpu/kernels/thread_scratch.h"
#include "kiln/base/check.h"

namespace kiln::backend::cpu {

namespace {

using namespace attention_detail;

// Copies n rows of Dh elements (row r at offset + r * stride) into dst [n][Dh] in f32,
// times `mul`.
void load_rows(const View& src, int64_t offset, int64_t stride, int64_t n, int64_t dh, float* dst, float mul = 1.0f) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t e = 0; e < dh; ++e) dst[r * dh + e] = src[offset + r * stride + e] * mul;
  }
}

// The same rows transposed into dst [Dh][kBk], zero-padded to kBk columns.
void load_rows_transposed(const View& src, int64_t offset, int64_t stride, int64_t n, int64_t dh, float* dst) {
  std::fill(dst, dst + dh * kBk, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t e = 0; e < dh; ++e) dst[e * kBk + r] = src[offset + r * stride + e];
  }
}

// s[r][c] = mul * q[r] . kt[:, c] for a tile: q [nq][Dh], kt [Dh][kBk].
template <int DH>
void tile_logits(const float* q, const float* kt, int64_t nq, int64_t dh_runtime, float mul, float* s) {
  const int64_t dh = DH > 0 ? DH : dh_runtime;
  for (int64_t r = 0; r < nq; ++r) {
    float acc[kBk] = {};
    const float* qr = q + r * dh;
    for (int64_t e = 0; e < dh; ++e) {
      const float qv = qr[e];
      const float* k = kt + e * kBk;
#pragma omp simd
      for (int64_t c = 0; c < kBk; ++c) acc[c] += qv * k[c];
    }
    float* sr = s + r * kBk;
#pragma omp simd
    for (int64_t c = 0; c < kBk; ++c) sr[c] = acc[c] * mul;
  }
}

// k and v once per call in f32 tile layouts, so tiles read contiguous memory whatever the
// operands' layout and dtype: kt/vt [B][K][blocks][Dh][kBk] (transposed, zero-padded) and
// kr/vr [B][K][blocks * kBk][Dh]. Extra memory: a few copies of k and v (linear in S), kept
// on the thread for the next call (thread_scratch.h); every element is written here.
struct KvPack {
  int64_t blocks = 0;
  float *kt = nullptr, *vt = nullptr, *kr = nullptr, *vr = nullptr;
  const float* tile(const float* t, const Geometry& g, int64_t b, int64_t kh, int64_t jb) const {
    return t + ((b * g.K + kh) * blocks + jb) * g.Dh * kBk;
  }
};

KvPack pack_kv(const Geometry& g, const View& k, const View& v, bool vt, bool kr, bool vr) {
  KvPack p;
  p.blocks = (g.S + kBk - 1) / kBk;
  const int64_t dh = g.Dh;
  const size_t n = static_cast<size_t>(g.B * g.K * p.blocks * dh * kBk);
  p.kt = thread_scratch<float>(ScratchSlot::kPack0, n);
  if (vt) p.vt = thread_scratch<float>(ScratchSlot::kPack1, n);
  if (kr) p.kr = thread_scratch<float>(ScratchSlot::kPack2, n);
  if (vr) p.vr = thread_scratch<float>(ScratchSlot::kPack3, n);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < g.B * g.K * p.blocks; ++blk) {
    const int64_t jb = blk % p.blocks, kh = (blk / p.blocks) % g.K, b = blk / (p.blocks * g.K);
    const int64_t j0 = jb * kBk, nk = std::min(kBk, g.S - j0);
    const int64_t src = ((b * g.S + j0) * g.K + kh) * dh, stride = g.K * dh, dst = blk * dh * kBk;
    load_rows_transposed(k, src, stride, nk, dh, p.kt + dst);
    if (vt) load_rows_transposed(v, src, stride, nk, dh, p.vt + dst);
    auto rows = [&](const View& x, float* out) {
      std::fill(out + dst, out + dst + dh * kBk, 0.0f);
      load_rows(x, src, stride, nk, dh, out + dst);
    };
    if (kr) rows(k, p.kr);
    if (vr) rows(v, p.vr);
  }
  return p;
}

// acc[0, Dh) = alpha * acc + sum_c w[c] rows[c] (rows [n][Dh]); the accumulator stays in
// registers when Dh is a compile-time constant.
template <int DH>
inline void accumulate_row(const float* w, const float* rows, int64_t n, int64_t dh_runtime, float alpha, float* acc) {
  if constexpr (DH > 0) {
    float a[DH];
#pragma omp simd
    for (int e = 0; e < DH; ++e) a[e] = acc[e] * alpha;
    for (int64_t c = 0; c < n; ++c) {
      const float wc = w[c];
      const float* r = rows + c * DH;
#pragma omp simd
      for (int e = 0; e < DH; ++e) a[e] += wc * r[e];
    }
#pragma omp simd
    for (int e = 0; e < DH; ++e) acc[e] = a[e];
  } else {
    for (int64_t e = 0; e < dh_runtime; ++e) acc[e] *= alpha;
    for (int64_t c = 0; c < n; ++c) {
      const float wc = w[c];
      const float* r = rows + c * dh_runtime;
      for (int64_t e = 0; e < dh_runtime; ++e) acc[e] += wc * r[e];
    }
  }
}

// For each key c of a tile: dk[c] += sum_r ds[r][c] q[r], dv[c] += sum_r p[r][c] dout[r]
// (p and ds are [nq][kBk]; q and dout [nq][Dh]).
template <int DH>
inline void accumulate_kv_grads(const float* p, const float* ds, const float* q, const float* dout, int64_t nq,
                                int64_t nk, int64_t dh_runtime, float* dk, float* dv) {
  const int64_t dh = DH > 0 ? DH : dh_runtime;
  for (int64_t c = 0; c < nk; ++c) {
    float a[DH > 0 ? DH : 1], bsum[DH > 0 ? DH : 1];
    if constexpr (DH > 0) {
#pragma omp simd
      for (int e = 0; e < DH; ++e) a[e] = bsum[e] = 0.0f;
      for (int64_t r = 0; r < nq; ++r) {
        const float pr = p[r * kBk + c], dr = ds[r * kBk + c];
        const float* qr = q + r * DH;
        const float* gr = dout + r * DH;
#pragma omp simd
        for (int e = 0; e < DH; ++e) {
          a[e] += dr * qr[e];
          bsum[e] += pr * gr[e];
        }
      }
#pragma omp simd
      for (int e = 0; e < DH; ++e) {
        dk[c * DH + e] += a[e];
        dv[c * DH + e] += bsum[e];
      }
    } else {
      for (int64_t r = 0; r < nq; ++r) {
        const float pr = p[r * kBk + c], dr = ds[r * kBk + c];
        for (int64_t e = 0; e < dh; ++e) {
          dk[c * dh + e] += dr * q[r * dh + e];
          dv[c * dh + e] += pr * dout[r * dh + e];
        }
      }
    }
  }
}

#if defined(__AVX512F__)
// Dh = 64 with the accumulators in registers (4 vectors per row).
template <>
inline void accumulate_row<64>(const float* w, const float* rows, int64_t n, int64_t, float alpha, float* acc) {
  const __m512 al = _mm512_set1_ps(alpha);
  __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(acc), al), a1 = _mm512_mul_ps(_mm512_loadu_ps(acc + 16), al);
  __m512 a2 = _mm512_mul_ps(_mm512_loadu_ps(acc + 32), al), a3 = _mm512_mul_ps(_mm512_loadu_ps(acc + 48), al);
  for (int64_t c = 0; c < n; ++c) {
    const __m512 wc = _mm512_set1_ps(w[c]);
    const float* r = rows + c * 64;
    a0 = _mm512_fmadd_ps(wc, _mm512_loadu_ps(r), a0);
    a1 = _mm512_fmadd_ps(wc, _mm512_loadu_ps(r + 16), a1);
    a2 = _mm512_fmadd_ps(wc, _mm512_loadu_ps(r + 32), a2);
    a3 = _mm512_fmadd_ps(wc, _mm512_loadu_ps(r + 48), a3);
  }
  _mm512_storeu_ps(acc, a0);
  _mm512_storeu_ps(acc + 16, a1);
  _mm512_storeu_ps(acc + 32, a2);
  _mm512_storeu_ps(acc + 48, a3);
}

template <>
inline void accumulate_kv_grads<64>(const float* p, const float* ds, const float* q, const float* dout, int64_t nq,
                                    int64_t nk, int64_t, float* dk, float* dv) {
  for (int64_t c = 0; c < nk; ++c) {
    __m512 k0 = _mm512_setzero_ps(), k1 = k0, k2 = k0, k3 = k0, v0 = k0, v1 = k0, v2 = k0, v3 = k0;
    for (int64_t r = 0; r < nq; ++r) {
      const __m512 pr = _mm512_set1_ps(p[r * kBk + c]), dr = _mm512_set1_ps(ds[r * kBk + c]);
      const float* qr = q + r * 64;
      const float* gr = dout + r * 64;
      k0 = _mm512_fmadd_ps(dr, _mm512_loadu_ps(qr), k0);
      k1 = _mm512_fmadd_ps(dr, _mm512_loadu_ps(qr + 16), k1);
      k2 = _mm512_fmadd_ps(dr, _mm512_loadu_ps(qr + 32), k2);
      k3 = _mm512_fmadd_ps(dr, _mm512_loadu_ps(qr + 48), k3);
      v0 = _mm512_fmadd_ps(pr, _mm512_loadu_ps(gr), v0);
      v1 = _mm512_fmadd_ps(pr, _mm512_loadu_ps(gr + 16), v1);
      v2 = _mm512_fmadd_ps(pr, _mm512_loadu_ps(gr + 32), v2);
      v3 = _mm512_fmadd_ps(pr, _mm512_loadu_ps(gr + 48), v3);
    }
    float* kc = dk + c * 64;
    float* vc = dv + c * 64;
    _mm512_storeu_ps(kc, _mm512_add_ps(_mm512_loadu_ps(kc), k0));
    _mm512_storeu_ps(kc + 16, _mm512_add_ps(_mm512_loadu_ps(kc + 16), k1));
    _mm512_storeu_ps(kc + 32, _mm512_add_ps(_mm512_loadu_ps(kc + 32), k2));
    _mm512_storeu_ps(kc + 48, _mm512_add_ps(_mm512_loadu_ps(kc + 48), k3));
    _mm512_storeu_ps(vc, _mm512_add_ps(_mm512_loadu_ps(vc), v0));
    _mm512_storeu_ps(vc + 16, _mm512_add_ps(_mm512_loadu_ps(vc + 16), v1));
    _mm512_storeu_ps(vc + 32, _mm512_add_ps(_mm512_loadu_ps(vc + 32), v2));
    _mm512_storeu_ps(vc + 48, _mm512_add_ps(_mm512_loadu_ps(vc + 48), v3));
  }
}

// Two query rows at a time share each loaded key column vector (8 accumulators).
template <>
void tile_logits<64>(const float* q, const float* kt, int64_t nq, int64_t, float mul, float* s) {
  const __m512 m = _mm512_set1_ps(mul);
  int64_t r = 0;
  for (; r + 2 <= nq; r += 2) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const float* q0 = q + r * 64;
    const float* q1 = q0 + 64;
    for (int e = 0; e < 64; ++e) {
      const float* k = kt + e * kBk;
      const __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16), k2 = _mm512_loadu_ps(k + 32),
                   k3 = _mm512_loadu_ps(k + 48);
      const __m512 x = _mm512_set1_ps(q0[e]), y = _mm512_set1_ps(q1[e]);
      a0 = _mm512_fmadd_ps(x, k0, a0);
      a1 = _mm512_fmadd_ps(x, k1, a1);
      a2 = _mm512_fmadd_ps(x, k2, a2);
      a3 = _mm512_fmadd_ps(x, k3, a3);
      b0 = _mm512_fmadd_ps(y, k0, b0);
      b1 = _mm512_fmadd_ps(y, k1, b1);
      b2 = _mm512_fmadd_ps(y, k2, b2);
      b3 = _mm512_fmadd_ps(y, k3, b3);
    }
    float* s0 = s + r * kBk;
    float* s1 = s0 + kBk;
    _mm512_storeu_ps(s0, _mm512_mul_ps(a0, m));
    _mm512_storeu_ps(s0 + 16, _mm512_mul_ps(a1, m));
    _mm512_storeu_ps(s0 + 32, _mm512_mul_ps(a2, m));
    _mm512_storeu_ps(s0 + 48, _mm512_mul_ps(a3, m));
    _mm512_storeu_ps(s1, _mm512_mul_ps(b0, m));
    _mm512_storeu_ps(s1 + 16, _mm512_mul_ps(b1, m));
    _mm512_storeu_ps(s1 + 32, _mm512_mul_ps(b2, m));
    _mm512_storeu_ps(s1 + 48, _mm512_mul_ps(b3, m));
  }
  for (; r < nq; ++r) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float* q0 = q + r * 64;
    for (int e = 0; e < 64; ++e) {
      const float* k = kt + e * kBk;
      const __m512 x = _mm512_set1_ps(q0[e]);
      a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k), a0);
      a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k + 16), a1);
      a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k + 32), a2);
      a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k + 48), a3);
    }
    float* s0 = s + r * kBk;
    _mm512_storeu_ps(s0, _mm512_mul_ps(a0, m));
    _mm512_storeu_ps(s0 + 16, _mm512_mul_ps(a1, m));
    _mm512_storeu_ps(s0 + 32, _mm512_mul_ps(a2, m));
    _mm512_storeu_ps(s0 + 48, _mm512_mul_ps(a3, m));
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
// The same kernels on 256-bit vectors (AVX2 CPUs: Zen 1-3, older Xeons), Dh = 64: eight
// vectors per row, accumulators in registers (the generic loops keep them in a stack array,
// a load and a store around every FMA).
template <>
inline void accumulate_row<64>(const float* w, const float* rows, int64_t n, int64_t, float alpha, float* acc) {
  const __m256 al = _mm256_set1_ps(alpha);
  __m256 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * i), al);
  for (int64_t c = 0; c < n; ++c) {
    const __m256 wc = _mm256_set1_ps(w[c]);
    const float* r = rows + c * 64;
    for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(wc, _mm256_loadu_ps(r + 8 * i), a[i]);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(acc + 8 * i, a[i]);
}

// dk and dv in two passes over the tile's rows: eight accumulators each, where both at once
// would need all sixteen registers and spill.
template <>
inline void accumulate_kv_grads<64>(const float* p, const float* ds, const float* q, const float* dout, int64_t nq,
                                    int64_t nk, int64_t, float* dk, float* dv) {
  for (int64_t c = 0; c < nk; ++c) {
    for (int pass = 0; pass < 2; ++pass) {
      const float* w = pass == 0 ? ds : p;
      const float* x = pass == 0 ? q : dout;
      float* out = (pass == 0 ? dk : dv) + c * 64;
      __m256 a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
      for (int64_t r = 0; r < nq; ++r) {
        const __m256 wr = _mm256_set1_ps(w[r * kBk + c]);
        const float* xr = x + r * 64;
        for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(wr, _mm256_loadu_ps(xr + 8 * i), a[i]);
      }
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + 8 * i, _mm256_add_ps(_mm256_loadu_ps(out + 8 * i), a[i]));
    }
  }
}

// One query row at a time: eight accumulators for the 64 keys of the tile.
template <>
void tile_logits<64>(const float* q, const float* kt, int64_t nq, int64_t, float mul, float* s) {
  const __m256 m = _mm256_set1_ps(mul);
  for (int64_t r = 0; r < nq; ++r) {
    __m256 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
    const float* q0 = q + r * 64;
    for (int e = 0; e < 64; ++e) {
      const float* k = kt + e * kBk;
      const __m256 x = _mm256_set1_ps(q0[e]);
      for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + 8 * i), a[i]);
    }
    float* s0 = s + r * kBk;
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(s0 + 8 * i, _mm256_mul_ps(a[i], m));
  }
}
#endif

// ---- forward ----

template <int DH>
void forward(const Geometry& g, std::span<const Value* const> in, Buffer& out, Buffer& lse) {
  const View q = view((*in[0])[0]), k = view((*in[1])[0]), v = view((*in[2])[0]);
  const View sinks = g.sinks >= 0 ? view((*in[g.sinks])[0]) : View{};
  const int32_t* qseg = g.q_seg >= 0 ? (*in[g.q_seg])[0].as<int32_t>() : nullptr;
  const int32_t* kseg = g.kv_seg >= 0 ? (*in[g.kv_seg])[0].as<int32_t>() : nullptr;
  const int64_t dh = DH > 0 ? DH : g.Dh;
  const int64_t qblocks = (g.T + kBq - 1) / kBq;
  const int64_t tasks = g.B * g.H * qblocks;
  float* lse_out = lse.as<float>();
  const KvPack pack = pack_kv(g, k, v, false, false, true);
#pragma omp parallel
  {
    std::vector<float> qt(kBq * dh), s(kBq * kBk), acc(kBq * dh), m(kBq), l(kBq);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % qblocks, h = (task / qblocks) % g.H, b = task / (qblocks * g.H);
      const int64_t kh = h / g.G;
      const int64_t i0 = qb * kBq, nq = std::min(kBq, g.T - i0);
      const int32_t* qs = qseg ? qseg + b * g.T : nullptr;
      const int32_t* ks = kseg ? kseg + b * g.S : nullptr;
      load_rows(q, ((b * g.T + i0) * g.H + h) * dh, g.H * dh, nq, dh, qt.data(), g.scale);
      const float sink = g.sinks >= 0 ? sinks[h] : kNegInf;
      std::fill(m.begin(), m.end(), sink);
      std::fill(l.begin(), l.end(), g.sinks >= 0 ? 1.0f : 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      auto [jlo, jhi] = g.key_range(i0, i0 + nq);
      for (int64_t j0 = jlo - jlo % kBk; j0 < jhi; j0 += kBk) {
        const int64_t nk = std::min(kBk, g.S - j0);
        const float* kt = pack.tile(pack.kt, g, b, kh, j0 / kBk);
        const float* vr = pack.tile(pack.vr, g, b, kh, j0 / kBk);
        tile_logits<DH>(qt.data(), kt, nq, dh, 1.0f, s.data());
        bool positional = !g.tile_unmasked(i0, i0 + nq, j0, j0 + nk);
        if (positional || qs || nk < kBk) mask_tile(g, qs, ks, i0, nq, j0, nk, positional, s.data());
        for (int64_t r = 0; r < nq; ++r) {
          float* sr = s.data() + r * kBk;
          const float m_new = std::max(m[r], row_max(sr));
          if (m_new == kNegInf) continue;  // nothing visible yet
          const float alpha = fast_exp(m[r] - m_new);
          const float sum = exp_row(sr, m_new);
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
          accumulate_row<DH>(sr, vr, nk, dh, alpha, acc.data() + r * dh);
        }
      }
      for (int64_t r = 0; r < nq; ++r) {
        const int64_t o = ((b * g.T + i0 + r) * g.H + h) * dh;
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        store_row(out, o, acc.data() + r * dh, dh, inv);
        lse_out[(b * g.H + h) * g.T + i0 + r] = l[r] > 0 ? m[r] + std::log(l[r]) : kNegInf;
      }
    }
  }
}

Kernel attention_kernel(const Instr& instr) {
  Geometry g(instr, false);
  return [g](std::span<const Value* const> in, Value& output) {
    const auto& q = (*in[0])[0].shape();
    // The planned storage when the executable gives it (every element is written below).
    const bool planned = output.size() == 2;
    Buffer out = planned ? output[0] : Buffer(q);
    Buffer lse = planned ? output[1] : Buffer(ir::Shape(DType::kF32, {g.B, g.H, g.T}));
    if (attention_bf16_dots_apply(g, in, false)) {
      attention_forward_bf16(g, in, out, lse);
    } else if (g.Dh == 64) {
      forward<64>(g, in, out, lse);
    } else if (g.Dh == 32) {
      forward<32>(g, in, out, lse);
    } else if (g.Dh == 128) {
      forward<128>(g, in, out, lse);
    } else {
      forward<0>(g, in, out, lse);
    }
    output = {out, lse};
  };
}

// ---- backward ----

template <int DH>
void backward(const Geometry& g, std::span<const Value* const> in, Buffer& dq, Buffer& dk, Buffer& dv,
              std::vector<float>& dsink_partial) {
  const View q = view((*in[0])[0]), k = view((*in[1])[0]), v = view((*in[2])[0]);
  const View sinks = g.sinks >= 0 ? view((*in[g.sinks])[0]) : View{};
  const int32_t* qseg = g.q_seg >= 0 ? (*in[g.q_seg])[0].as<int32_t>() : nullptr;
  const int32_t* kseg = g.kv_seg >= 0 ? (*in[g.kv_seg])[0].as<int32_t>() : nullptr;
  const View out = view((*in[g.out])[0]), dout = view((*in[g.dout])[0]);
  const View lse = view((*in[g.lse])[0]), dlse = view((*in[g.dlse])[0]);
  const int64_t dh = DH > 0 ? DH : g.Dh;
  const int64_t tasks = g.B * g.H;
  // dk and dv sum over the G query heads of a kv head, which run as different tasks: each
  // thread accumulates into its own [B, K, S, Dh] copy, summed at the end (memory: threads x
  // the size of dk and dv, linear in S).
  const int threads = omp_get_max_threads();
  const int64_t kv_elems = g.B * g.K * g.S * dh;
  float* dk_acc = thread_scratch<float>(ScratchSlot::kAccumulate0, static_cast<size_t>(threads * kv_elems));
  float* dv_acc = thread_scratch<float>(ScratchSlot::kAccumulate1, static_cast<size_t>(threads * kv_elems));
  const KvPack pack = pack_kv(g, k, v, true, true, false);
  int team = 1;
#pragma omp parallel num_threads(threads)
  {
    // Each thread clears its own copies (the kept scratch holds the last call's sums); only the
    // team's copies are summed, should it be smaller than asked.
    if (omp_get_thread_num() == 0) team = omp_get_num_threads();
    float* dka = dk_acc + omp_get_thread_num() * kv_elems;
    float* dva = dv_acc + omp_get_thread_num() * kv_elems;
    std::fill(dka, dka + kv_elems, 0.0f);
    std::fill(dva, dva + kv_elems, 0.0f);
    std::vector<float> qf(g.T * dh), dof(g.T * dh), dqa(g.T * dh), dvec(g.T), lrow(g.T);
    std::vector<float> s(kBq * kBk), dp(kBq * kBk);
// Static: every (batch, head) task has the same work, and a fixed assignment of heads to
// threads makes dk and dv (sums of the threads' partial sums) the same bits on every run.
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t h = task % g.H, b = task / g.H, kh = h / g.G;
      const int32_t* qs = qseg ? qseg + b * g.T : nullptr;
      const int32_t* ks = kseg ? kseg + b * g.S : nullptr;
      const int64_t q_off = (b * g.T * g.H + h) * dh;
      load_rows(q, q_off, g.H * dh, g.T, dh, qf.data());
      load_rows(dout, q_off, g.H * dh, g.T, dh, dof.data());
      std::fill(dqa.begin(), dqa.end(), 0.0f);
      const float sink = g.sinks >= 0 ? sinks[h] : kNegInf;
      float dsink = 0;
      for (int64_t i = 0; i < g.T; ++i) {
        float d = -dlse[(b * g.H + h) * g.T + i];
        for (int64_t e = 0; e < dh; ++e) d += dof[i * dh + e] * out[q_off + i * g.H * dh + e];
        dvec[i] = d;
        lrow[i] = lse[(b * g.H + h) * g.T + i];
        if (g.sinks >= 0 && lrow[i] != kNegInf) dsink -= std::exp(sink - lrow[i]) * d;
      }
      dsink_partial[b * g.H + h] = dsink;
      for (int64_t j0 = 0; j0 < g.S; j0 += kBk) {
        const int64_t nk = std::min(kBk, g.S - j0);
        auto [ilo, ihi] = g.query_range(j0, j0 + nk);
        if (ilo >= ihi) continue;
        const float* kt = pack.tile(pack.kt, g, b, kh, j0 / kBk);
        const float* vt = pack.tile(pack.vt, g, b, kh, j0 / kBk);
        const float* kr = pack.tile(pack.kr, g, b, kh, j0 / kBk);
        float* dkb = dka + ((b * g.K + kh) * g.S + j0) * dh;
        float* dvb = dva + ((b * g.K + kh) * g.S + j0) * dh;
        for (int64_t i0 = ilo - ilo % kBq; i0 < ihi; i0 += kBq) {
          const int64_t nq = std::min(kBq, g.T - i0);
          const float* qb = qf.data() + i0 * dh;
          const float* dob = dof.data() + i0 * dh;
          tile_logits<DH>(qb, kt, nq, dh, g.scale, s.data());
          bool positional = !g.tile_unmasked(i0, i0 + nq, j0, j0 + nk);
          if (positional || qs || nk < kBk) mask_tile(g, qs, ks, i0, nq, j0, nk, positional, s.data());
          tile_logits<DH>(dob, vt, nq, dh, 1.0f, dp.data());
          for (int64_t r = 0; r < nq; ++r) {
            const float lr = lrow[i0 + r] == kNegInf ? std::numeric_limits<float>::infinity() : lrow[i0 + r];
            float* sr = s.data() + r * kBk;
            float* dpr = dp.data() + r * kBk;
            const float dr = dvec[i0 + r];
            exp_row_ds(sr, dpr, lr, dr);  // p (0 where masked or the row sees nothing), ds without the scale
            accumulate_row<DH>(dpr, kr, nk, dh, 1.0f, dqa.data() + (i0 + r) * dh);
          }
          accumulate_kv_grads<DH>(s.data(), dp.data(), qb, dob, nq, nk, dh, dkb, dvb);
        }
      }
      for (int64_t i = 0; i < g.T; ++i) store_row(dq, q_off + i * g.H * dh, dqa.data() + i * dh, dh, g.scale);
    }
  }
  // Sum the threads' copies into dk and dv ([B, S, K, Dh]).
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < g.B * g.K * g.S; ++row) {
    const int64_t j = row % g.S, kh = (row / g.S) % g.K, b = row / (g.S * g.K);
    const int64_t o = ((b * g.S + j) * g.K + kh) * dh;
    float* sk = dk_acc + row * dh;  // thread 0's copy collects the sum
    float* sv = dv_acc + row * dh;
    for (int t = 1; t < team; ++t) {  // only the team's copies were cleared
#pragma omp simd
      for (int64_t e = 0; e < dh; ++e) {
        sk[e] += dk_acc[t * kv_elems + row * dh + e];
        sv[e] += dv_acc[t * kv_elems + row * dh + e];
      }
    }
    store_row(dk, o, sk, dh, g.scale);
    store_row(dv, o, sv, dh, 1.0f);
  }
}

Kernel attention_grad_kernel(const Instr& instr) {
  Geometry g(instr, true);
  return [g](std::span<const Value* const> in, Value& output) {
    const bool planned = output.size() == (g.sinks >= 0 ? 4u : 3u);  // every element is written below
    Buffer dq = planned ? output[0] : Buffer((*in[0])[0].shape());
    Buffer dk = planned ? output[1] : Buffer((*in[1])[0].shape());
    Buffer dv = planned ? output[2] : Buffer((*in[2])[0].shape());
    Buffer ds_planned = planned && g.sinks >= 0 ? output[3] : Buffer();
    std::vector<float> partial(g.B * g.H, 0.0f);
    if (attention_bf16_dots_apply(g, in, true)) {
      attention_backward_bf16(g, in, dq, dk, dv, partial);
    } else if (g.Dh == 64) {
      backward<64>(g, in, dq, dk, dv, partial);
    } else if (g.Dh == 32) {
      backward<32>(g, in, dq, dk, dv, partial);
    } else if (g.Dh == 128) {
      backward<128>(g, in, dq, dk, dv, partial);
    } else {
      backward<0>(g, in, dq, dk, dv, partial);
    }
    output = {dq, dk, dv};
    if (g.sinks >= 0) {
      Buffer ds = planned ? ds_planned : Buffer((*in[g.sinks])[0].shape());
      for (int64_t h = 0; h < g.H; ++h) {
        float sum = 0;
        for (int64_t b = 0; b < g.B; ++b) sum += partial[b * g.H + h];
        store(ds, h, sum);
      }
      output.push_back(ds);
    }
  };
}

bool f32_or_bf16(DType d) { return d == DType::kF32 || d == DType::kBF16; }

// Every floating operand f32 or bf16 (segments are s32).
bool accepts(const Instr& instr) {
  for (const Instr* o : instr.operands()) {
    DType d = o->shape().dtype();
    if (d != DType::kS32 && !f32_or_bf16(d)) return false;
  }
  return true;
}

// Scratch outside the plan (the outputs go straight into the planned storage). k [B, S, K, Dh]
// is packed into tiles of 64 keys (KvPack): the forward packs kt and vr; the gradient kt, vt
// and kr, with per-thread dk and dv copies and row buffers (q [B, T, H, Dh]).
int64_t packed_kv_bytes(const Instr& instr) {
  const auto& k = instr.operand(1)->shape().dims();
  const int64_t B = k[0], S = k[1], K = k[2], Dh = k[3];
  return 4 * B * K * ((S + 63) / 64) * 64 * Dh;
}

int64_t attention_scratch_bytes(const Instr& instr) { return 2 * packed_kv_bytes(instr); }

int64_t attention_grad_scratch_bytes(const Instr& instr) {
  const auto& k = instr.operand(1)->shape().dims();
  const int64_t B = k[0], S = k[1], K = k[2], Dh = k[3], T = instr.operand(0)->shape().dims()[1];
  const int64_t threads = omp_get_max_threads();
  return 3 * packed_kv_bytes(instr) + 2 * threads * 4 * B * S * K * Dh + threads * 4 * (3 * T * Dh + 2 * T);
}

}  // namespace

std::vector<NativeKernelEntry> attention_kernels() {
  return {{ir::Opcode::kAttention, accepts, attention_kernel, attention_scratch_bytes},
          {ir::Opcode::kAttentionGrad, accepts, attention_grad_kernel, attention_grad_scratch_bytes}};
}

}  // namespace kiln::backend::cpu
