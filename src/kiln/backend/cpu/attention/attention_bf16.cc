// Flash attention on bf16 dot products (see attention_bf16.h). The loop structure is the
// f32 kernels' (attention_kernels.cc): forward tasks of (batch, query head, 64 queries),
// backward tasks of (batch, query head) over (key block, query block) tiles; what changes is
// how the five tile products are computed. `vdpbf16ps` adds, per f32 lane, the two products
// of a pair of bf16 values, so every operand is laid out in pairs along the contracted
// dimension, as 32-bit words:
//
//   product             contracted   broadcast side (a pair)        vector side (16 pairs)
//   s  = q k^T          head dim     q row, straight from the input  k: "dim pairs" tile
//   dp = dout v^T       head dim     dout row, from the input        v: "dim pairs" tile
//   o += p v            keys         p row rounded to bf16           v: "key pairs" tile
//   dq += ds k          keys         ds row rounded to bf16          k: "key pairs" tile
//   dk^T += q^T ds      queries      q row-pair words (once per task) ds: "row pairs" of the tile
//   dv^T += dout^T p    queries      dout row-pair words (per task)   p: "row pairs" of the tile
//
// Tiles of one key block (kBk = 64 keys, zero-padded), in words:
//   dim pairs [Dh/2][kBk]: word(x[c][2p], x[c][2p+1]) at p * kBk + c
//   key pairs [kBk/2][Dh]: word(x[2cp][e], x[2cp+1][e]) at cp * Dh + e
// dk and dv accumulate transposed ([Dh][kBk] per key block, per thread) and are transposed
// back once when the threads' copies are summed. The softmax (max, exp, sums, lse) stays f32.
#include "kiln/backend/cpu/attention/attention_bf16.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <tuple>

#include "kiln/backend/cpu/cpu_features.h"
#include "kiln/backend/cpu/kernels/thread_scratch.h"
#include "kiln/base/check.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define KILN_BF16_DOTS 1
#else
#define KILN_BF16_DOTS 0
#endif

namespace kiln::backend::cpu {

using namespace attention_detail;

namespace {

constexpr int64_t kDh = 64;
constexpr int64_t kTileWords = kDh * kBk / 2;  // one packed tile: 2048 words of two bf16

bool cpu_has_bf16_dots() {
#if KILN_BF16_DOTS
  return cpu_features().avx512_bf16;  // KILN_CPU_ISA=avx2 turns it off (cpu_features.h)
#else
  return false;
#endif
}

// Read at every call (cheap next to the kernel), so a benchmark can switch it between runs.
bool enabled_by_env() {
  const char* v = std::getenv("KILN_ATTENTION_BF16_DOTS");
  return v == nullptr || std::string_view(v) != "0";
}

bool is_bf16(const Value* v) { return v->size() == 1 && (*v)[0].shape().dtype() == DType::kBF16; }

}  // namespace

bool attention_bf16_dots_apply(const Geometry& g, std::span<const Value* const> in, bool grad) {
  if (g.Dh != kDh || !cpu_has_bf16_dots() || !enabled_by_env()) return false;
  if (!is_bf16(in[0]) || !is_bf16(in[1]) || !is_bf16(in[2])) return false;
  return !grad || is_bf16(in[g.dout]);
}

#if KILN_BF16_DOTS

namespace {

inline uint32_t pair_at(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
inline __m512bh splat(uint32_t w) { return (__m512bh)_mm512_set1_epi32(static_cast<int>(w)); }
inline __m512bh load_pairs(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// ---- packing ----

// n rows of Dh bf16 (row c at x + c * stride) into a dim-pairs tile, zero past n.
void pack_dim_pairs(const uint16_t* x, int64_t stride, int64_t n, uint32_t* t) {
  std::memset(t, 0, kTileWords * 4);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t p = 0; p < kDh / 2; ++p) t[p * kBk + c] = pair_at(x + c * stride + 2 * p);
  }
}

// The same rows into a key-pairs tile.
void pack_key_pairs(const uint16_t* x, int64_t stride, int64_t n, uint32_t* t) {
  for (int64_t cp = 0; cp < kBk / 2; ++cp) {
    const int64_t c = 2 * cp;
    for (int64_t e = 0; e < kDh; ++e) {
      const uint32_t lo = c < n ? x[c * stride + e] : 0, hi = c + 1 < n ? x[(c + 1) * stride + e] : 0;
      t[cp * kDh + e] = lo | hi << 16;
    }
  }
}

// k and v of every (batch, kv head, key block) in the layouts a kernel asks for, in this
// thread's kept scratch (thread_scratch.h). Storage left uninitialised (every word is written
// by the packing, in parallel, where a zero-filled vector would first be cleared by one thread).
struct Pack {
  int64_t blocks = 0;
  uint32_t *k_dim = nullptr, *v_dim = nullptr, *k_key = nullptr, *v_key = nullptr;
  const uint32_t* tile(const uint32_t* t, const Geometry& g, int64_t b, int64_t kh, int64_t jb) const {
    return t + ((b * g.K + kh) * blocks + jb) * kTileWords;
  }
};

Pack pack(const Geometry& g, const uint16_t* k, const uint16_t* v, bool k_dim, bool v_dim, bool k_key, bool v_key) {
  Pack p;
  p.blocks = (g.S + kBk - 1) / kBk;
  const size_t n = static_cast<size_t>(g.B * g.K * p.blocks * kTileWords);
  if (k_dim) p.k_dim = thread_scratch<uint32_t>(ScratchSlot::kPack0, n);
  if (v_dim) p.v_dim = thread_scratch<uint32_t>(ScratchSlot::kPack1, n);
  if (k_key) p.k_key = thread_scratch<uint32_t>(ScratchSlot::kPack2, n);
  if (v_key) p.v_key = thread_scratch<uint32_t>(ScratchSlot::kPack3, n);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < g.B * g.K * p.blocks; ++blk) {
    const int64_t jb = blk % p.blocks, kh = (blk / p.blocks) % g.K, b = blk / (p.blocks * g.K);
    const int64_t j0 = jb * kBk, nk = std::min(kBk, g.S - j0);
    const int64_t src = ((b * g.S + j0) * g.K + kh) * kDh, stride = g.K * kDh, dst = blk * kTileWords;
    if (k_dim) pack_dim_pairs(k + src, stride, nk, p.k_dim + dst);
    if (v_dim) pack_dim_pairs(v + src, stride, nk, p.v_dim + dst);
    if (k_key) pack_key_pairs(k + src, stride, nk, p.k_key + dst);
    if (v_key) pack_key_pairs(v + src, stride, nk, p.v_key + dst);
  }
  return p;
}

// n rows of Dh bf16 (row r at x + r * stride) as pairs of rows:
// out[rp * Dh + e] = word(x[2rp][e], x[2rp+1][e]), zero past n. Contiguous in e, so it
// vectorizes; accumulate_transposed broadcasts single words of it, for which the order of
// the words in memory does not matter.
void row_pair_words(const uint16_t* x, int64_t stride, int64_t n, int64_t pairs, uint32_t* out) {
  for (int64_t rp = 0; rp < pairs; ++rp) {
    const uint16_t* r0 = x + 2 * rp * stride;
    uint32_t* o = out + rp * kDh;
    if (2 * rp + 1 < n) {
      const uint16_t* r1 = r0 + stride;
#pragma omp simd
      for (int64_t e = 0; e < kDh; ++e) o[e] = r0[e] | static_cast<uint32_t>(r1[e]) << 16;
    } else {
#pragma omp simd
      for (int64_t e = 0; e < kDh; ++e) o[e] = r0[e];
    }
  }
}

// A tile row of kBk floats rounded to bf16 (to nearest even).
inline void round_row(const float* s, uint16_t* out) {
  for (int64_t c = 0; c < kBk; c += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + c + 16), _mm512_loadu_ps(s + c));
    _mm512_storeu_si512(out + c, (__m512i)v);
  }
}

// Rows of a [nq][kBk] f32 tile as row pairs: out[rp * kBk + c] = word(bf16 x[2rp][c],
// bf16 x[2rp+1][c]); a row at or past nq counts as 0.
inline void row_pairs(const float* x, int64_t nq, uint32_t* out) {
  for (int64_t rp = 0; 2 * rp < nq; ++rp) {
    const float* r0 = x + 2 * rp * kBk;
    const bool second = 2 * rp + 1 < nq;
    for (int64_t c = 0; c < kBk; c += 16) {
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + c)));
      const __m512i hi =
          second ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0 + kBk + c))) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + rp * kBk + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// ---- tile products ----

// acc[i][0..NB) += sum over `pairs` dimension pairs p of rows[i] pair p times NB vectors of
// x's pair row p, for R rows (bf16, row i at rows + i * row_stride; pair p at rows[i] + 2p)
// and x's pair rows x_stride apart: R x NB accumulators share each loaded vector of x. The
// inner product of both tile products below.
template <int R, int NB = 4>
inline void dot_pairs(__m512 (&acc)[R][NB], const uint16_t* rows, int64_t row_stride, const uint32_t* x,
                      int64_t x_stride, int64_t pairs) {
  for (int64_t p = 0; p < pairs; ++p) {
    const uint32_t* xp = x + p * x_stride;
    __m512bh k[NB];
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) k[j] = load_pairs(xp + 16 * j);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512bh u = splat(pair_at(rows + i * row_stride + 2 * p));
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], u, k[j]);
    }
  }
}

// s[i][c] = mul * a[i] . x[:, c] for R rows a[i] (bf16, row i at a + i * lda), a dim-pairs
// tile x and NB 16-column blocks (x and s point at the first).
template <int R, int NB>
inline void logits_rows(const uint16_t* a, int64_t lda, const uint32_t* x, __m512 mul, float* s) {
  __m512 acc[R][NB];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  dot_pairs<R, NB>(acc, a, lda, x, kBk, kDh / 2);
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(s + i * kBk + 16 * j, _mm512_mul_ps(acc[i][j], mul));
  }
}

// The 16-column blocks [b0, b1) of R rows; the blocks outside are set to 0.
template <int R>
inline void logits_blocks(const uint16_t* a, int64_t lda, const uint32_t* x, __m512 mul, float* s, int64_t b0,
                          int64_t b1) {
  for (int i = 0; i < R; ++i) {
    std::fill(s + i * kBk, s + i * kBk + 16 * b0, 0.0f);
    std::fill(s + i * kBk + 16 * b1, s + (i + 1) * kBk, 0.0f);
  }
  x += 16 * b0, s += 16 * b0;
  switch (b1 - b0) {
    case 4: return logits_rows<R, 4>(a, lda, x, mul, s);
    case 3: return logits_rows<R, 3>(a, lda, x, mul, s);
    case 2: return logits_rows<R, 2>(a, lda, x, mul, s);
    case 1: return logits_rows<R, 1>(a, lda, x, mul, s);
    default: return;
  }
}

// Columns [lo, hi) of a tile that the causal and window masks leave each of its rows (from
// Geometry::visible_columns, or [0, nk) for a tile they leave alone). The tile products
// below skip, per group of rows, the columns (keys) that none of the group can see: their
// p and ds are 0, so the products they would add are zeros.
struct Visible {
  int64_t lo[kBq], hi[kBq];

  Visible(const Geometry& g, int64_t i0, int64_t nq, int64_t j0, int64_t nk, bool positional) {
    for (int64_t r = 0; r < nq; ++r) {
      if (positional) {
        std::tie(lo[r], hi[r]) = g.visible_columns(i0 + r, j0, nk);
      } else {
        lo[r] = 0, hi[r] = nk;
      }
    }
  }
  // The union over rows [r, r + n): an empty run when no row sees anything.
  std::pair<int64_t, int64_t> rows(int64_t r, int64_t n) const {
    int64_t l = kBk, h = 0;
    for (int64_t i = r; i < r + n; ++i) {
      if (lo[i] < hi[i]) l = std::min(l, lo[i]), h = std::max(h, hi[i]);
    }
    return {l, std::max(l, h)};
  }
};

// s [nq][kBk] = mul * a x for nq rows of a (bf16, row stride lda) and a dim-pairs tile, in
// the 16-column blocks that some row of each group of four can see (0 elsewhere; the mask
// sets what the logits need there).
void logits_bf16(const uint16_t* a, int64_t lda, const uint32_t* x, int64_t nq, float mul, float* s, const Visible& vis) {
  const __m512 m = _mm512_set1_ps(mul);
  int64_t r = 0;
  for (; r + 4 <= nq; r += 4) {
    const auto [lo, hi] = vis.rows(r, 4);
    logits_blocks<4>(a + r * lda, lda, x, m, s + r * kBk, lo / 16, (hi + 15) / 16);
  }
  for (; r < nq; ++r) {
    const auto [lo, hi] = vis.rows(r, 1);
    logits_blocks<1>(a + r * lda, lda, x, m, s + r * kBk, lo / 16, (hi + 15) / 16);
  }
}

// acc[i] = alpha[i] * acc[i] + sum_c w[i][c] x[c][:] for R rows (w[i]: kBk bf16 weights at
// w + i * kBk, acc[i]: Dh floats at acc + i * Dh) and a key-pairs tile x; pairs from `pairs`
// on are zero and skipped. R x 4 accumulators share each loaded vector of x.
template <int R>
inline void accumulate_rows_bf16(const uint16_t* w, const uint32_t* x, int64_t pairs, const float* alpha, float* acc) {
  __m512 a[R][4];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const __m512 al = _mm512_set1_ps(alpha[i]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) a[i][j] = _mm512_mul_ps(_mm512_loadu_ps(acc + i * kDh + 16 * j), al);
  }
  dot_pairs<R>(a, w, kBk, x, kDh, pairs);
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc + i * kDh + 16 * j, a[i][j]);
  }
}

// The same for rows r < nq of a [nq][kBk] bf16 weight tile and acc [nq][Dh], over the key
// pairs that some row of each group of four can see.
void accumulate_tile_bf16(const uint16_t* w, const uint32_t* x, int64_t nq, const float* alpha, float* acc,
                          const Visible& vis) {
  int64_t r = 0;
  for (; r + 4 <= nq; r += 4) {
    const auto [lo, hi] = vis.rows(r, 4);
    const int64_t p0 = lo / 2, p1 = std::max(p0, (hi + 1) / 2);
    accumulate_rows_bf16<4>(w + r * kBk + 2 * p0, x + p0 * kDh, p1 - p0, alpha + r, acc + r * kDh);
  }
  for (; r < nq; ++r) {
    const auto [lo, hi] = vis.rows(r, 1);
    const int64_t p0 = lo / 2, p1 = std::max(p0, (hi + 1) / 2);
    accumulate_rows_bf16<1>(w + r * kBk + 2 * p0, x + p0 * kDh, p1 - p0, alpha + r, acc + r * kDh);
  }
}

// Row pairs [rp0, rp1) of a tile in which the same 16-column blocks [b0, b0 + nb) hold a
// visible entry (p and ds are 0 in the other blocks of those rows).
struct PairRun {
  int64_t rp0, rp1;
  int b0, nb;
};

// The runs of the tile's `pairs` row pairs, in order; row pairs that see nothing are left out.
int pair_runs(const Visible& vis, int64_t nq, int64_t pairs, PairRun* runs) {
  int n = 0;
  for (int64_t rp = 0; rp < pairs; ++rp) {
    const auto [lo, hi] = vis.rows(2 * rp, std::min<int64_t>(2, nq - 2 * rp));
    if (lo >= hi) continue;
    const int b0 = static_cast<int>(lo / 16), nb = static_cast<int>((hi + 15) / 16) - b0;
    if (n > 0 && runs[n - 1].rp1 == rp && runs[n - 1].b0 == b0 && runs[n - 1].nb == nb) {
      runs[n - 1].rp1 = rp + 1;
    } else {
      runs[n++] = {rp, rp + 1, b0, nb};
    }
  }
  return n;
}

// a[i][B0 + j] += sum over rp in [rp0, rp1) of y[rp * Dh + e + i] . x[rp][16 (B0 + j) ...],
// i < 4, j < NB: one run of accumulate_transposed with its accumulators in registers.
template <int B0, int NB>
inline void transposed_run(__m512 (&a)[4][4], const uint32_t* y, const uint32_t* x, int64_t e, int64_t rp0, int64_t rp1) {
  for (int64_t rp = rp0; rp < rp1; ++rp) {
    const uint32_t* xr = x + rp * kBk + 16 * B0;
    __m512bh k[NB];
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) k[j] = load_pairs(xr + 16 * j);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512bh u = splat(y[rp * kDh + e + i]);
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) a[i][B0 + j] = _mm512_dpbf16_ps(a[i][B0 + j], u, k[j]);
    }
  }
}

// acc[e][c] += sum_rp y[rp * Dh + e] . x[rp][c] for e < Dh, c < kBk (acc [Dh][kBk] f32):
// y the task's row-pair words of q or dout (from the tile's first pair), x the tile's row
// pairs of ds or p, over each run's row pairs and column blocks (the rest add zeros). Four
// rows of acc at a time share each loaded vector of x.
void accumulate_transposed(const uint32_t* y, const uint32_t* x, const PairRun* runs, int nruns, float* acc) {
  for (int64_t e = 0; e < kDh; e += 4) {
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[i][j] = _mm512_loadu_ps(acc + (e + i) * kBk + 16 * j);
    }
    for (int k = 0; k < nruns; ++k) {
      const PairRun& r = runs[k];
      switch (r.b0 * 4 + r.nb) {
        case 0 * 4 + 4: transposed_run<0, 4>(a, y, x, e, r.rp0, r.rp1); break;
        case 0 * 4 + 3: transposed_run<0, 3>(a, y, x, e, r.rp0, r.rp1); break;
        case 0 * 4 + 2: transposed_run<0, 2>(a, y, x, e, r.rp0, r.rp1); break;
        case 0 * 4 + 1: transposed_run<0, 1>(a, y, x, e, r.rp0, r.rp1); break;
        case 1 * 4 + 3: transposed_run<1, 3>(a, y, x, e, r.rp0, r.rp1); break;
        case 1 * 4 + 2: transposed_run<1, 2>(a, y, x, e, r.rp0, r.rp1); break;
        case 1 * 4 + 1: transposed_run<1, 1>(a, y, x, e, r.rp0, r.rp1); break;
        case 2 * 4 + 2: transposed_run<2, 2>(a, y, x, e, r.rp0, r.rp1); break;
        case 2 * 4 + 1: transposed_run<2, 1>(a, y, x, e, r.rp0, r.rp1); break;
        case 3 * 4 + 1: transposed_run<3, 1>(a, y, x, e, r.rp0, r.rp1); break;
        default: KILN_CHECK(false) << "column blocks " << r.b0 << " + " << r.nb;
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc + (e + i) * kBk + 16 * j, a[i][j]);
    }
  }
}

const uint16_t* bits(const Value* v) { return (*v)[0].as<uint16_t>(); }

}  // namespace

void attention_forward_bf16(const Geometry& g, std::span<const Value* const> in, Buffer& out, Buffer& lse) {
  const uint16_t* q = bits(in[0]);
  const View sinks = g.sinks >= 0 ? view((*in[g.sinks])[0]) : View{};
  const int32_t* qseg = g.q_seg >= 0 ? (*in[g.q_seg])[0].as<int32_t>() : nullptr;
  const int32_t* kseg = g.kv_seg >= 0 ? (*in[g.kv_seg])[0].as<int32_t>() : nullptr;
  const int64_t qblocks = (g.T + kBq - 1) / kBq;
  const int64_t tasks = g.B * g.H * qblocks;
  const int64_t lda = g.H * kDh;
  float* lse_out = lse.as<float>();
  const Pack kv = pack(g, bits(in[1]), bits(in[2]), true, false, false, true);
#pragma omp parallel
  {
    std::vector<float> s(kBq * kBk), acc(kBq * kDh), m(kBq), l(kBq);
    alignas(64) uint16_t pb[kBq * kBk];  // the tile's p in bf16
    float alpha[kBq];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % qblocks, h = (task / qblocks) % g.H, b = task / (qblocks * g.H);
      const int64_t kh = h / g.G;
      const int64_t i0 = qb * kBq, nq = std::min(kBq, g.T - i0);
      const int32_t* qs = qseg ? qseg + b * g.T : nullptr;
      const int32_t* ks = kseg ? kseg + b * g.S : nullptr;
      const uint16_t* qrows = q + ((b * g.T + i0) * g.H + h) * kDh;
      const float sink = g.sinks >= 0 ? sinks[h] : kNegInf;
      std::fill(m.begin(), m.end(), sink);
      std::fill(l.begin(), l.end(), g.sinks >= 0 ? 1.0f : 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      auto [jlo, jhi] = g.key_range(i0, i0 + nq);
      for (int64_t j0 = jlo - jlo % kBk; j0 < jhi; j0 += kBk) {
        const int64_t nk = std::min(kBk, g.S - j0);
        const bool positional = !g.tile_unmasked(i0, i0 + nq, j0, j0 + nk);
        const Visible vis(g, i0, nq, j0, nk, positional);
        logits_bf16(qrows, lda, kv.tile(kv.k_dim, g, b, kh, j0 / kBk), nq, g.scale, s.data(), vis);
        if (positional || qs || nk < kBk) mask_tile(g, qs, ks, i0, nq, j0, nk, positional, s.data());
        // The softmax of every row first, then p v for four rows at a time.
        for (int64_t r = 0; r < nq; ++r) {
          float* sr = s.data() + r * kBk;
          const float m_new = std::max(m[r], row_max(sr));
          if (m_new == kNegInf) {  // nothing visible yet: the row's acc stays 0
            alpha[r] = 1.0f;
            std::memset(pb + r * kBk, 0, sizeof(uint16_t) * kBk);
            continue;
          }
          alpha[r] = fast_exp(m[r] - m_new);
          l[r] = l[r] * alpha[r] + exp_row(sr, m_new);
          m[r] = m_new;
          round_row(sr, pb + r * kBk);
        }
        accumulate_tile_bf16(pb, kv.tile(kv.v_key, g, b, kh, j0 / kBk), nq, alpha, acc.data(), vis);
      }
      for (int64_t r = 0; r < nq; ++r) {
        const int64_t o = ((b * g.T + i0 + r) * g.H + h) * kDh;
        store_row(out, o, acc.data() + r * kDh, kDh, l[r] > 0 ? 1.0f / l[r] : 0.0f);
        lse_out[(b * g.H + h) * g.T + i0 + r] = l[r] > 0 ? m[r] + std::log(l[r]) : kNegInf;
      }
    }
  }
}

void attention_backward_bf16(const Geometry& g, std::span<const Value* const> in, Buffer& dq, Buffer& dk, Buffer& dv,
                             std::vector<float>& dsink_partial) {
  const uint16_t* q = bits(in[0]);
  const uint16_t* dout = bits(in[g.dout]);
  const View sinks = g.sinks >= 0 ? view((*in[g.sinks])[0]) : View{};
  const int32_t* qseg = g.q_seg >= 0 ? (*in[g.q_seg])[0].as<int32_t>() : nullptr;
  const int32_t* kseg = g.kv_seg >= 0 ? (*in[g.kv_seg])[0].as<int32_t>() : nullptr;
  const uint16_t* out_bits = bits(in[g.out]);  // out has q's dtype: bf16
  const View lse = view((*in[g.lse])[0]), dlse = view((*in[g.dlse])[0]);
  const int64_t stride = g.H * kDh, tpairs = (g.T + 1) / 2;
  const Pack kv = pack(g, bits(in[1]), bits(in[2]), true, true, true, false);
  // dk^T and dv^T per key block ([Dh][kBk]), one copy per thread (the G query heads of a
  // kv head run as different tasks), summed and transposed back at the end.
  const int threads = omp_get_max_threads();
  const int64_t kv_elems = g.B * g.K * kv.blocks * kDh * kBk;
  // Each thread of the team clears its own copies (a zero-filled vector would be cleared by
  // one thread); only the team's copies are summed, should it be smaller than asked.
  float* dk_acc = thread_scratch<float>(ScratchSlot::kAccumulate0, static_cast<size_t>(threads * kv_elems));
  float* dv_acc = thread_scratch<float>(ScratchSlot::kAccumulate1, static_cast<size_t>(threads * kv_elems));
  int team = 1;
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_thread_num() == 0) team = omp_get_num_threads();
    float* dka = dk_acc + omp_get_thread_num() * kv_elems;
    float* dva = dv_acc + omp_get_thread_num() * kv_elems;
    std::fill(dka, dka + kv_elems, 0.0f);
    std::fill(dva, dva + kv_elems, 0.0f);
    std::vector<uint32_t> qt(kDh * tpairs), dot(kDh * tpairs), ds_pairs(kBq / 2 * kBk), p_pairs(kBq / 2 * kBk);
    std::vector<float> dqa(g.T * kDh), dvec(g.T), lrow(g.T), s(kBq * kBk), dp(kBq * kBk);
    alignas(64) uint16_t dsb[kBq * kBk];  // the tile's ds in bf16
    float ones[kBq];
    std::fill(ones, ones + kBq, 1.0f);
// Static: every (batch, head) task has the same work, and a fixed assignment of heads to
// threads makes dk and dv (sums of the threads' partial sums) the same bits on every run.
#pragma omp for schedule(static)
    for (int64_t task = 0; task < g.B * g.H; ++task) {
      const int64_t h = task % g.H, b = task / g.H, kh = h / g.G;
      const int32_t* qs = qseg ? qseg + b * g.T : nullptr;
      const int32_t* ks = kseg ? kseg + b * g.S : nullptr;
      const int64_t q_off = (b * g.T * g.H + h) * kDh;
      row_pair_words(q + q_off, stride, g.T, tpairs, qt.data());
      row_pair_words(dout + q_off, stride, g.T, tpairs, dot.data());
      std::fill(dqa.begin(), dqa.end(), 0.0f);
      const float sink = g.sinks >= 0 ? sinks[h] : kNegInf;
      float dsink = 0;
      // D_i = dout_i . out_i - dlse_i, each a sequential sum over e, for 16 rows side by side
      // (16 independent chains instead of one; rows past T repeat the last and are dropped).
      for (int64_t i = 0; i < g.T; i += 16) {
        float d[16];
        const uint16_t* orow[16];
        const uint16_t* grow[16];
        for (int r = 0; r < 16; ++r) {
          const int64_t row = std::min(i + r, g.T - 1);
          d[r] = -dlse[(b * g.H + h) * g.T + row];
          orow[r] = out_bits + q_off + row * stride;
          grow[r] = dout + q_off + row * stride;
        }
        for (int64_t e = 0; e < kDh; ++e) {
          for (int r = 0; r < 16; ++r) d[r] += bf16_to_f32(grow[r][e]) * bf16_to_f32(orow[r][e]);
        }
        for (int64_t r = 0; r < std::min<int64_t>(16, g.T - i); ++r) dvec[i + r] = d[r];
      }
      for (int64_t i = 0; i < g.T; ++i) {
        lrow[i] = lse[(b * g.H + h) * g.T + i];
        if (g.sinks >= 0 && lrow[i] != kNegInf) dsink -= std::exp(sink - lrow[i]) * dvec[i];
      }
      dsink_partial[b * g.H + h] = dsink;
      for (int64_t j0 = 0; j0 < g.S; j0 += kBk) {
        const int64_t nk = std::min(kBk, g.S - j0), jb = j0 / kBk;
        auto [ilo, ihi] = g.query_range(j0, j0 + nk);
        if (ilo >= ihi) continue;
        const uint32_t* kd = kv.tile(kv.k_dim, g, b, kh, jb);
        const uint32_t* vd = kv.tile(kv.v_dim, g, b, kh, jb);
        const uint32_t* kk = kv.tile(kv.k_key, g, b, kh, jb);
        float* dkb = dka + ((b * g.K + kh) * kv.blocks + jb) * kDh * kBk;
        float* dvb = dva + ((b * g.K + kh) * kv.blocks + jb) * kDh * kBk;
        for (int64_t i0 = ilo - ilo % kBq; i0 < ihi; i0 += kBq) {
          const int64_t nq = std::min(kBq, g.T - i0);
          const bool positional = !g.tile_unmasked(i0, i0 + nq, j0, j0 + nk);
          const Visible vis(g, i0, nq, j0, nk, positional);
          logits_bf16(q + q_off + i0 * stride, stride, kd, nq, g.scale, s.data(), vis);
          if (positional || qs || nk < kBk) mask_tile(g, qs, ks, i0, nq, j0, nk, positional, s.data());
          logits_bf16(dout + q_off + i0 * stride, stride, vd, nq, 1.0f, dp.data(), vis);
          for (int64_t r = 0; r < nq; ++r) {
            const float lr = lrow[i0 + r] == kNegInf ? std::numeric_limits<float>::infinity() : lrow[i0 + r];
            float* dpr = dp.data() + r * kBk;
            exp_row_ds(s.data() + r * kBk, dpr, lr, dvec[i0 + r]);  // s = p, dp = ds (without the scale)
            round_row(dpr, dsb + r * kBk);
          }
          accumulate_tile_bf16(dsb, kk, nq, ones, dqa.data() + i0 * kDh, vis);
          const int64_t pairs = (nq + 1) / 2;
          row_pairs(dp.data(), nq, ds_pairs.data());
          row_pairs(s.data(), nq, p_pairs.data());
          PairRun runs[kBq / 2];
          const int nruns = pair_runs(vis, nq, pairs, runs);
          accumulate_transposed(qt.data() + i0 / 2 * kDh, ds_pairs.data(), runs, nruns, dkb);
          accumulate_transposed(dot.data() + i0 / 2 * kDh, p_pairs.data(), runs, nruns, dvb);
        }
      }
      for (int64_t i = 0; i < g.T; ++i) store_row(dq, q_off + i * stride, dqa.data() + i * kDh, kDh, g.scale);
    }
  }
  // Sum the threads' transposed copies into dk and dv ([B, S, K, Dh]), one key block at a
  // time: the sum runs along contiguous memory (thread copies added in order, from 0, as
  // before), then each key's row is read out of the summed tile.
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < g.B * g.K * kv.blocks; ++blk) {
    const int64_t jb = blk % kv.blocks, kh = (blk / kv.blocks) % g.K, b = blk / (kv.blocks * g.K);
    const int64_t j0 = jb * kBk, nk = std::min(kBk, g.S - j0);
    alignas(64) float sk[kDh * kBk], sv[kDh * kBk];
    std::fill(sk, sk + kDh * kBk, 0.0f);
    std::fill(sv, sv + kDh * kBk, 0.0f);
    for (int t = 0; t < team; ++t) {
      const float* ak = dk_acc + t * kv_elems + blk * kDh * kBk;
      const float* av = dv_acc + t * kv_elems + blk * kDh * kBk;
#pragma omp simd
      for (int64_t x = 0; x < kDh * kBk; ++x) {
        sk[x] += ak[x];
        sv[x] += av[x];
      }
    }
    for (int64_t c = 0; c < nk; ++c) {
      float rk[kDh], rv[kDh];
      for (int64_t e = 0; e < kDh; ++e) rk[e] = sk[e * kBk + c], rv[e] = sv[e * kBk + c];
      const int64_t o = ((b * g.S + j0 + c) * g.K + kh) * kDh;
      store_row(dk, o, rk, kDh, g.scale);
      store_row(dv, o, rv, kDh, 1.0f);
    }
  }
}

#else  // no AVX512-BF16 code in this build: attention_bf16_dots_apply() is always false

void attention_forward_bf16(const Geometry&, std::span<const Value* const>, Buffer&, Buffer&) {
  KILN_CHECK(false) << "bf16 attention kernels are not compiled into this build";
}
void attention_backward_bf16(const Geometry&, std::span<const Value* const>, Buffer&, Buffer&, Buffer&,
                             std::vector<float>&) {
  KILN_CHECK(false) << "bf16 attention kernels are not compiled into this build";
}

#endif

}  // namespace kiln::backend::cpu
