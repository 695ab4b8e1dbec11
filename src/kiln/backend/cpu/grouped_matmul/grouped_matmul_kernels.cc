// Grouped (ragged) matmuls for MoE dispatch (ops/grouped_matmul_ops.cc): oneDNN sgemm calls
// on tiles of each non-empty group's row range, with the group sizes read at run time:
//
//   grouped_matmul:             out[rows of g] = x[rows of g] @ w[g]   (w[g]^T with transpose_rhs)
//   grouped_matmul_weight_grad: out[g] = x[rows of g]^T @ dy[rows of g]
//
// Padding rows past the groups are zeroed, empty groups skipped (their weight gradient is
// zero). Each group's product is cut into tiles that one OpenMP loop hands to the threads
// (oneDNN runs single-threaded inside the parallel region). bf16 operands run each tile on
// oneDNN's bf16 matmul (bf16_matmul.h: f32 accumulation, the f32 or bf16 result written
// directly); f32 operands on sgemm.
#include <dnnl.h>

#include <algorithm>
#include <cstring>
#include <omp.h>

#include "kiln/backend/cpu/gemm/bf16_matmul.h"
#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/base/check.h"

namespace kiln::backend::cpu {

namespace {

using ir::Instr;

// Rows [begin, end) of group g (g: the index the tile's weight or gradient block is found by).
struct RowRange {
  int64_t g, begin, end;
};

// Row ranges of `count` consecutive groups of sizes s, cut at `rows` (negative sizes count
// as 0), as the op defines; numbered first_g, first_g + 1, ...
std::vector<RowRange> cut_rows(const int32_t* s, int64_t count, int64_t rows, int64_t first_g) {
  std::vector<RowRange> out;
  int64_t at = 0;
  for (int64_t g = 0; g < count; ++g) {
    const int64_t end = std::min(at + std::max<int64_t>(0, s[g]), rows);
    out.push_back({first_g + g, at, end});
    at = end;
  }
  return out;
}

// The groups of a plain grouped matmul (sizes s32 [E]), numbered by expert.
std::vector<RowRange> groups_of(const Buffer& sizes, int64_t rows) {
  return cut_rows(sizes.as<int32_t>(), sizes.num_elements(), rows, 0);
}

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float* c, int64_t ldc, float beta = 0.0f) {
  dnnl_status_t s = dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  KILN_CHECK(s == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(s);
}

// One tile of work: rows [r0, r1) (gmm: output rows; tgmm: the contracted rows) of group
// g, output columns [c0, c1) and, for tgmm, output rows [k0, k1).
struct Tile {
  int64_t g, r0, r1, c0, c1, k0, k1;
};

// Tiles are sized so that there are many more of them than threads (so one group holding
// every row still keeps every thread busy) while each stays a sgemm large enough to run
// near peak; all of them go to one OpenMP loop (one parallel region per kernel call, each
// sgemm single-threaded inside it) instead of one threaded sgemm per group, whose start-up
// and barrier per call dominate when there are many small groups.
constexpr int64_t kTileRows = 256, kTileCols = 256;

template <typename Fn>
void run_tiles(const std::vector<Tile>& tiles, Fn&& fn) {
  const int64_t n = static_cast<int64_t>(tiles.size());
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int64_t i = 0; i < n; ++i) fn(tiles[i]);
}

// sgemm tiles of a grouped matmul: every range's rows cut into kTileRows rows and the
// output into kTileCols columns.
std::vector<Tile> sgemm_gmm_tiles(const std::vector<RowRange>& ranges, int64_t N) {
  std::vector<Tile> tiles;
  for (const RowRange& g : ranges) {
    for (int64_t r = g.begin; r < g.end; r += kTileRows) {
      for (int64_t c = 0; c < N; c += kTileCols) {
        tiles.push_back({g.g, r, std::min(r + kTileRows, g.end), c, std::min(c + kTileCols, N), 0, 0});
      }
    }
  }
  return tiles;
}

// sgemm tiles of a weight gradient: per non-empty range, its [K, N] block cut into
// kTileRows x kTileCols tiles, each summing over all of the range's rows.
std::vector<Tile> sgemm_tgmm_tiles(const std::vector<RowRange>& ranges, int64_t K, int64_t N) {
  std::vector<Tile> tiles;
  for (const RowRange& g : ranges) {
    for (int64_t k = 0; g.end > g.begin && k < K; k += kTileRows) {
      for (int64_t c = 0; c < N; c += kTileCols) {
        tiles.push_back({g.g, g.begin, g.end, c, std::min(c + kTileCols, N), k, std::min(k + kTileRows, K)});
      }
    }
  }
  return tiles;
}

// bf16 tiles are cut differently from the sgemm tiles: oneDNN's bf16 matmul packs both
// operands on every call, so it pays for fewer, larger calls. Each group's rows are split
// into equal parts of at most kBf16TileRows (a 322-row group becomes two of 161, not 256 and
// a thin 66-row remainder), the output columns into parts of at most kBf16TileCols, and the
// largest tiles go first so that the dynamic schedule ends with small ones. Measured with
// oneDNN 2.6 on 2 threads, gpt-oss-small's expert shapes (2048 rows over 8 uneven groups,
// K = N = 512, operands cold): 1.94 ms with the sgemm tiles vs 1.72 ms (grouped matmul) and
// 1.79 vs 1.57 ms (weight gradient: one whole [K, N] block per group). Cuts depend on the
// shapes and group sizes only, never on the thread count.
constexpr int64_t kBf16TileRows = 384, kBf16TileCols = 512, kBf16MinTiles = 4;

int64_t parts_of(int64_t n, int64_t at_most) { return std::max<int64_t>(1, (n + at_most - 1) / at_most); }

void largest_first(std::vector<Tile>& tiles, bool weight_grad) {
  auto work = [weight_grad](const Tile& t) {
    return (t.r1 - t.r0) * (t.c1 - t.c0) * (weight_grad ? t.k1 - t.k0 : 1);
  };
  std::stable_sort(tiles.begin(), tiles.end(), [&](const Tile& a, const Tile& b) { return work(a) > work(b); });
}

// Grouped-matmul tiles of the bf16 kernels: every range's rows in equal parts, the N output
// columns in equal parts (more of them when there would be fewer than kBf16MinTiles tiles).
std::vector<Tile> bf16_gmm_tiles(const std::vector<RowRange>& ranges, int64_t N) {
  std::vector<Tile> tiles;
  for (int64_t col_parts = parts_of(N, kBf16TileCols);; col_parts *= 2) {
    tiles.clear();
    for (const RowRange& r : ranges) {
      const int64_t n = r.end - r.begin, row_parts = parts_of(n, kBf16TileRows);
      for (int64_t i = 0; n > 0 && i < row_parts; ++i) {
        for (int64_t j = 0; j < col_parts; ++j) {
          tiles.push_back({r.g, r.begin + n * i / row_parts, r.begin + n * (i + 1) / row_parts, N * j / col_parts,
                           N * (j + 1) / col_parts, 0, 0});
        }
      }
    }
    if (static_cast<int64_t>(tiles.size()) >= kBf16MinTiles || N / (2 * col_parts) < 64) break;
  }
  largest_first(tiles, false);
  return tiles;
}

// Weight-gradient tiles of the bf16 kernels: per non-empty range, its [K, N] output block in
// equal parts of at most kBf16TileCols both ways (each tile sums over all of the range's
// rows), split finer when there would be fewer than kBf16MinTiles tiles.
// Tile::g is the output block, [r0, r1) the rows summed, [k0, k1) x [c0, c1) the block's part.
std::vector<Tile> bf16_tgmm_tiles(const std::vector<RowRange>& ranges, int64_t K, int64_t N) {
  std::vector<Tile> tiles;
  int64_t k_parts = parts_of(K, kBf16TileCols), c_parts = parts_of(N, kBf16TileCols);
  for (;;) {
    tiles.clear();
    for (const RowRange& r : ranges) {
      for (int64_t i = 0; r.end > r.begin && i < k_parts; ++i) {
        for (int64_t j = 0; j < c_parts; ++j) {
          tiles.push_back({r.g, r.begin, r.end, N * j / c_parts, N * (j + 1) / c_parts, K * i / k_parts,
                           K * (i + 1) / k_parts});
        }
      }
    }
    if (static_cast<int64_t>(tiles.size()) >= kBf16MinTiles) break;
    if (N / (2 * c_parts) >= 64 && N / c_parts >= K / k_parts) {
      c_parts *= 2;
    } else if (K / (2 * k_parts) >= 64) {
      k_parts *= 2;
    } else {
      break;
    }
  }
  largest_first(tiles, true);
  return tiles;
}

// bf16 x [M, K] @ w [E, K, N] (or [E, N, K] with transpose_rhs) -> [M, N] f32 or bf16.
Kernel bf16_gmm_kernel(const Instr& instr) {
  const int64_t M = instr.operand(0)->shape().dim(0), K = instr.operand(0)->shape().dim(1);
  const int64_t N = instr.shape().dim(1);
  const bool t = instr.attrs().get_int_or("transpose_rhs", 0) != 0;
  const bool f32_out = instr.shape().dtype() == ir::DType::kF32;
  const size_t out_elem = f32_out ? 4 : 2;
  return [=](std::span<const Value* const> in, Value& out) {
    const uint16_t* X = (*in[0])[0].as<uint16_t>();
    const uint16_t* W = (*in[1])[0].as<uint16_t>();
    std::vector<RowRange> groups = groups_of((*in[2])[0], M);
    char* Y = static_cast<char*>(out[0].data());
    int64_t used = groups.empty() ? 0 : groups.back().end;
    if (used < M) std::memset(Y + used * N * out_elem, 0, out_elem * (M - used) * N);  // padding rows
    if (N == 0) return;
    run_tiles(bf16_gmm_tiles(groups, N), [&](const Tile& tile) {
      Bf16MatmulDesc d;
      d.m = tile.r1 - tile.r0, d.n = tile.c1 - tile.c0, d.k = K;
      d.trans_b = t, d.lda = K, d.ldb = t ? K : N, d.ldc = N, d.f32_out = f32_out;
      // w[g] is [K, N] (row stride N), or [N, K] with transpose_rhs (row stride K).
      const uint16_t* Wg = W + tile.g * K * N + (t ? tile.c0 * K : tile.c0);
      bf16_matmul(d, X + tile.r0 * K, Wg, Y + (tile.r0 * N + tile.c0) * out_elem);
    });
  };
}

// bf16 x [M, K], dy [M, N] -> per group x[rows]^T dy[rows]: [E, K, N] f32 or bf16.
Kernel bf16_tgmm_kernel(const Instr& instr) {
  const int64_t M = instr.operand(0)->shape().dim(0), K = instr.operand(0)->shape().dim(1);
  const int64_t N = instr.operand(1)->shape().dim(1);
  const bool f32_out = instr.shape().dtype() == ir::DType::kF32;
  const size_t out_elem = f32_out ? 4 : 2;
  return [=](std::span<const Value* const> in, Value& out) {
    const uint16_t* X = (*in[0])[0].as<uint16_t>();
    const uint16_t* D = (*in[1])[0].as<uint16_t>();
    std::vector<RowRange> groups = groups_of((*in[2])[0], M);
    char* O = static_cast<char*>(out[0].data());
    for (const RowRange& g : groups) {
      // An empty group's gradient is zero.
      if (g.end == g.begin) std::memset(O + g.g * K * N * out_elem, 0, K * N * out_elem);
    }
    run_tiles(bf16_tgmm_tiles(groups, K, N), [&](const Tile& tile) {
      // out[g][k0:k1, c0:c1] = x[rows, k0:k1]^T dy[rows, c0:c1]
      Bf16MatmulDesc d;
      d.m = tile.k1 - tile.k0, d.n = tile.c1 - tile.c0, d.k = tile.r1 - tile.r0;
      d.trans_a = true, d.lda = K, d.ldb = N, d.ldc = N, d.f32_out = f32_out;
      bf16_matmul(d, X + tile.r0 * K + tile.k0, D + tile.r0 * N + tile.c0,
                  O + (tile.g * K * N + tile.k0 * N + tile.c0) * out_elem);
    });
  };
}

Kernel gmm_kernel(const Instr& instr) {
  const int64_t M = instr.operand(0)->shape().dim(0), K = instr.operand(0)->shape().dim(1);
  const int64_t N = instr.shape().dim(1);
  const bool t = instr.attrs().get_int_or("transpose_rhs", 0) != 0;
  if (instr.operand(0)->shape().dtype() == ir::DType::kBF16) return bf16_gmm_kernel(instr);
  return [=](std::span<const Value* const> in, Value& out) {
    Buffer x_wide = widen_to_f32((*in[0])[0]), w_wide = widen_to_f32((*in[1])[0]);
    const float* X = x_wide.as<float>();
    const float* W = w_wide.as<float>();
    std::vector<RowRange> groups = groups_of((*in[2])[0], M);
    bool narrow_out = out[0].shape().dtype() == ir::DType::kBF16;
    Buffer y_wide = narrow_out ? Buffer(out[0].shape().with_dtype(ir::DType::kF32)) : out[0];
    float* Y = y_wide.as<float>();
    int64_t used = groups.empty() ? 0 : groups.back().end;
    if (used < M) std::memset(Y + used * N, 0, sizeof(float) * (M - used) * N);  // padding rows
    if (K == 0) std::memset(Y, 0, sizeof(float) * used * N);
    if (K > 0 && N > 0) {
      run_tiles(sgemm_gmm_tiles(groups, N), [&](const Tile& tile) {
        // w[g] is [K, N] (row stride N), or [N, K] with transpose_rhs (row stride K).
        const float* Wg = W + tile.g * K * N + (t ? tile.c0 * K : tile.c0);
        sgemm('N', t ? 'T' : 'N', tile.r1 - tile.r0, tile.c1 - tile.c0, K, X + tile.r0 * K, K, Wg, t ? K : N,
              Y + tile.r0 * N + tile.c0, N);
      });
    }
    if (narrow_out) narrow_to_bf16(y_wide, out[0]);
  };
}

Kernel tgmm_kernel(const Instr& instr) {
  const int64_t M = instr.operand(0)->shape().dim(0), K = instr.operand(0)->shape().dim(1);
  const int64_t N = instr.operand(1)->shape().dim(1);
  if (instr.operand(0)->shape().dtype() == ir::DType::kBF16) return bf16_tgmm_kernel(instr);
  return [=](std::span<const Value* const> in, Value& out) {
    Buffer x_wide = widen_to_f32((*in[0])[0]), d_wide = widen_to_f32((*in[1])[0]);
    const float* X = x_wide.as<float>();
    const float* D = d_wide.as<float>();
    std::vector<RowRange> groups = groups_of((*in[2])[0], M);
    bool narrow_out = out[0].shape().dtype() == ir::DType::kBF16;
    Buffer o_wide = narrow_out ? Buffer(out[0].shape().with_dtype(ir::DType::kF32)) : out[0];
    float* O = o_wide.as<float>();
    for (const RowRange& g : groups) {
      // An empty group's gradient is zero.
      if (g.end == g.begin) std::fill(O + g.g * K * N, O + (g.g + 1) * K * N, 0.0f);
    }
    run_tiles(sgemm_tgmm_tiles(groups, K, N), [&](const Tile& tile) {
      // out[g][k0:k1, c0:c1] = x[rows, k0:k1]^T dy[rows, c0:c1]
      sgemm('T', 'N', tile.k1 - tile.k0, tile.c1 - tile.c0, tile.r1 - tile.r0, X + tile.r0 * K + tile.k0, K,
            D + tile.r0 * N + tile.c0, N, O + tile.g * K * N + tile.k0 * N + tile.c0, N);
    });
    if (narrow_out) narrow_to_bf16(o_wide, out[0]);
  };
}

bool f32_or_bf16(ir::DType d) { return d == ir::DType::kF32 || d == ir::DType::kBF16; }

// The batched form's row ranges (sizes s32 [P, Gl], each entry's rows cut at M, counted
// within the entry): every entry's, entry p's group g numbered p * Gl + g.
std::vector<RowRange> batched_ranges(const int32_t* S, int64_t P, int64_t Gl, int64_t M) {
  std::vector<RowRange> ranges;
  for (int64_t p = 0; p < P; ++p) {
    for (const RowRange& r : cut_rows(S + p * Gl, Gl, M, p * Gl)) ranges.push_back(r);
  }
  return ranges;
}

// Entry p's row ranges for its weight gradient: group g numbered by the [K, N] block it adds
// into, that of expert (p mod B) * Gl + g.
std::vector<RowRange> entry_gradient_ranges(const int32_t* S, int64_t p, int64_t Gl, int64_t B, int64_t M) {
  return cut_rows(S + p * Gl, Gl, M, (p % B) * Gl);
}

// Batched bf16 x [P, M, K] @ w [E, K, N] (or [E, N, K]) -> [P, M, N] f32 or bf16, every tile
// on the bf16 matmul (no widened copies of the operands).
Kernel batched_bf16_gmm_kernel(const Instr& instr) {
  const ir::Shape& xs = instr.operand(0)->shape();
  const int64_t P = xs.dim(0), M = xs.dim(1), K = xs.dim(2), N = instr.shape().dim(2);
  const int64_t Gl = instr.operand(2)->shape().dim(1), B = instr.operand(1)->shape().dim(0) / Gl;
  const bool t = instr.attrs().get_int_or("transpose_rhs", 0) != 0;
  const bool f32_out = instr.shape().dtype() == ir::DType::kF32;
  const size_t out_elem = f32_out ? 4 : 2;
  return [=](std::span<const Value* const> in, Value& out) {
    const uint16_t* X = (*in[0])[0].as<uint16_t>();
    const uint16_t* W = (*in[1])[0].as<uint16_t>();
    char* Y = static_cast<char*>(out[0].data());
    std::memset(Y, 0, out_elem * P * M * N);  // padding rows stay zero
    if (K == 0) return;
    run_tiles(bf16_gmm_tiles(batched_ranges((*in[2])[0].as<int32_t>(), P, Gl, M), N), [&](const Tile& tile) {
      const int64_t p = tile.g / Gl, expert = (p % B) * Gl + tile.g % Gl;
      Bf16MatmulDesc d;
      d.m = tile.r1 - tile.r0, d.n = tile.c1 - tile.c0, d.k = K;
      d.trans_b = t, d.lda = K, d.ldb = t ? K : N, d.ldc = N, d.f32_out = f32_out;
      const uint16_t* Wg = W + expert * K * N + (t ? tile.c0 * K : tile.c0);
      bf16_matmul(d, X + (p * M + tile.r0) * K, Wg, Y + ((p * M + tile.r0) * N + tile.c0) * out_elem);
    });
  };
}

// Batched bf16 weight gradient -> [E, K, N] f32 or bf16. With one entry per expert block at
// most (P <= E / Gl) each tile's product is written straight into the result. Otherwise the
// first entry of each expert block writes its tiles' f32 sums straight into an f32
// accumulator (the output itself when it is f32); later entries of the same block add theirs
// from a per-tile f32 scratch; a bf16 result is rounded once at the end.
Kernel batched_bf16_tgmm_kernel(const Instr& instr) {
  const ir::Shape& xs = instr.operand(0)->shape();
  const int64_t P = xs.dim(0), M = xs.dim(1), K = xs.dim(2), N = instr.operand(1)->shape().dim(2);
  const int64_t Gl = instr.operand(2)->shape().dim(1), B = instr.shape().dim(0) / Gl;
  return [=](std::span<const Value* const> in, Value& out) {
    const uint16_t* X = (*in[0])[0].as<uint16_t>();
    const uint16_t* D = (*in[1])[0].as<uint16_t>();
    const int32_t* S = (*in[2])[0].as<int32_t>();
    const bool narrow_out = out[0].shape().dtype() == ir::DType::kBF16;
    if (P <= B) {
      // One entry per expert block at most (no expert parallelism, or one entry per shard):
      // each tile's product is its whole sum, written once in the result's dtype.
      const size_t elem = narrow_out ? 2 : 4;
      char* O = static_cast<char*>(out[0].data());
      std::memset(O, 0, elem * B * Gl * K * N);  // empty groups' gradients are zero
      for (int64_t p = 0; p < P; ++p) {
        run_tiles(bf16_tgmm_tiles(entry_gradient_ranges(S, p, Gl, B, M), K, N), [&](const Tile& tile) {
          Bf16MatmulDesc d;
          d.m = tile.k1 - tile.k0, d.n = tile.c1 - tile.c0, d.k = tile.r1 - tile.r0;
          d.trans_a = true, d.lda = K, d.ldb = N, d.ldc = N, d.f32_out = !narrow_out;
          bf16_matmul(d, X + (p * M + tile.r0) * K + tile.k0, D + (p * M + tile.r0) * N + tile.c0,
                      O + (tile.g * K * N + tile.k0 * N + tile.c0) * elem);
        });
      }
      return;
    }
    Buffer o_wide = narrow_out ? Buffer(out[0].shape().with_dtype(ir::DType::kF32)) : out[0];
    float* O = o_wide.as<float>();
    std::memset(O, 0, sizeof(float) * B * Gl * K * N);  // empty groups' gradients are zero
    for (int64_t p = 0; p < P; ++p) {
      std::vector<Tile> tiles = bf16_tgmm_tiles(entry_gradient_ranges(S, p, Gl, B, M), K, N);
      const bool first = p < B;  // the first entry of its block: nothing to add to yet
      run_tiles(tiles, [&](const Tile& tile) {
        Bf16MatmulDesc d;
        d.m = tile.k1 - tile.k0, d.n = tile.c1 - tile.c0, d.k = tile.r1 - tile.r0;
        d.trans_a = true, d.lda = K, d.ldb = N, d.f32_out = true;
        const uint16_t* a = X + (p * M + tile.r0) * K + tile.k0;
        const uint16_t* b = D + (p * M + tile.r0) * N + tile.c0;
        float* o = O + tile.g * K * N + tile.k0 * N + tile.c0;
        if (first) {
          d.ldc = N;
          bf16_matmul(d, a, b, o);
          return;
        }
        std::vector<float> part(d.m * d.n);
        d.ldc = d.n;
        bf16_matmul(d, a, b, part.data());
        for (int64_t i = 0; i < d.m; ++i) {
          for (int64_t j = 0; j < d.n; ++j) o[i * N + j] += part[i * d.n + j];
        }
      });
    }
    if (narrow_out) narrow_to_bf16(o_wide, out[0]);
  };
}

// Batched form (expert parallelism, ops/grouped_matmul_ops.cc): x [P, M, K], sizes s32
// [P, Gl]; entry p's groups use the Gl experts of block p mod (E / Gl). bf16 operands run on
// the bf16 kernels above; f32 tiles on sgemm, all entries' tiles in one parallel loop.
Kernel batched_gmm_kernel(const Instr& instr) {
  if (instr.operand(0)->shape().dtype() == ir::DType::kBF16 && instr.operand(1)->shape().dtype() == ir::DType::kBF16) {
    return batched_bf16_gmm_kernel(instr);
  }
  const ir::Shape& xs = instr.operand(0)->shape();
  const int64_t P = xs.dim(0), M = xs.dim(1), K = xs.dim(2), N = instr.shape().dim(2);
  const int64_t Gl = instr.operand(2)->shape().dim(1), B = instr.operand(1)->shape().dim(0) / Gl;
  const bool t = instr.attrs().get_int_or("transpose_rhs", 0) != 0;
  return [=](std::span<const Value* const> in, Value& out) {
    Buffer x_wide = widen_to_f32((*in[0])[0]), w_wide = widen_to_f32((*in[1])[0]);
    const float* X = x_wide.as<float>();
    const float* W = w_wide.as<float>();
    const int32_t* S = (*in[2])[0].as<int32_t>();
    bool narrow_out = out[0].shape().dtype() == ir::DType::kBF16;
    Buffer y_wide = narrow_out ? Buffer(out[0].shape().with_dtype(ir::DType::kF32)) : out[0];
    float* Y = y_wide.as<float>();
    std::memset(Y, 0, sizeof(float) * P * M * N);  // padding rows stay zero
    std::vector<Tile> tiles = K > 0 ? sgemm_gmm_tiles(batched_ranges(S, P, Gl, M), N) : std::vector<Tile>{};
    run_tiles(tiles, [&](const Tile& tile) {
      const int64_t p = tile.g / Gl, expert = (p % B) * Gl + tile.g % Gl;
      const float* Wg = W + expert * K * N + (t ? tile.c0 * K : tile.c0);
      sgemm('N', t ? 'T' : 'N', tile.r1 - tile.r0, tile.c1 - tile.c0, K, X + (p * M + tile.r0) * K, K, Wg, t ? K : N,
            Y + (p * M + tile.r0) * N + tile.c0, N);
    });
    if (narrow_out) narrow_to_bf16(y_wide, out[0]);
  };
}

// Batched weight gradient: out [E, K, N], entry p's x_g^T dy_g added into expert
// (p mod B) * Gl + g. Entries sharing a block run one after the other (beta = 1).
Kernel batched_tgmm_kernel(const Instr& instr) {
  if (instr.operand(0)->shape().dtype() == ir::DType::kBF16 && instr.operand(1)->shape().dtype() == ir::DType::kBF16) {
    return batched_bf16_tgmm_kernel(instr);
  }
  const ir::Shape& xs = instr.operand(0)->shape();
  const int64_t P = xs.dim(0), M = xs.dim(1), K = xs.dim(2), N = instr.operand(1)->shape().dim(2);
  const int64_t Gl = instr.operand(2)->shape().dim(1), B = instr.shape().dim(0) / Gl;
  return [=](std::span<const Value* const> in, Value& out) {
    Buffer x_wide = widen_to_f32((*in[0])[0]), d_wide = widen_to_f32((*in[1])[0]);
    const float* X = x_wide.as<float>();
    const float* D = d_wide.as<float>();
    const int32_t* S = (*in[2])[0].as<int32_t>();
    bool narrow_out = out[0].shape().dtype() == ir::DType::kBF16;
    Buffer o_wide = narrow_out ? Buffer(out[0].shape().with_dtype(ir::DType::kF32)) : out[0];
    float* O = o_wide.as<float>();
    std::memset(O, 0, sizeof(float) * B * Gl * K * N);  // empty groups' gradients are zero
    for (int64_t p = 0; p < P; ++p) {
      std::vector<Tile> tiles = sgemm_tgmm_tiles(entry_gradient_ranges(S, p, Gl, B, M), K, N);
      run_tiles(tiles, [&](const Tile& tile) {
        sgemm('T', 'N', tile.k1 - tile.k0, tile.c1 - tile.c0, tile.r1 - tile.r0, X + (p * M + tile.r0) * K + tile.k0, K,
              D + (p * M + tile.r0) * N + tile.c0, N, O + tile.g * K * N + tile.k0 * N + tile.c0, N, 1.0f);
      });
    }
    if (narrow_out) narrow_to_bf16(o_wide, out[0]);
  };
}

bool accepts_batched(const Instr& instr) {
  return instr.operand(0)->shape().rank() == 3 && f32_or_bf16(instr.shape().dtype()) &&
         f32_or_bf16(instr.operand(0)->shape().dtype()) && f32_or_bf16(instr.operand(1)->shape().dtype());
}

bool accepts(const Instr& instr) {
  return instr.operand(0)->shape().rank() == 2 && f32_or_bf16(instr.shape().dtype()) && f32_or_bf16(instr.operand(0)->shape().dtype()) &&
         f32_or_bf16(instr.operand(1)->shape().dtype());
}

// What the kernels above allocate besides their planned result. bf16 operands run on the
// bf16 matmul with no widened copy; only the batched weight gradient with a bf16 result sums
// into an f32 accumulator of the result's size (and, past an expert block's first entry,
// per-tile f32 parts: at most a tile per thread). f32 operands: a bf16 operand widened, and
// an f32 result narrowed to bf16 after.
int64_t grouped_scratch_bytes(const Instr& instr) {
  const bool narrow_out = instr.shape().dtype() == ir::DType::kBF16;
  const int64_t out_wide = narrow_out ? 4 * instr.shape().num_elements() : 0;
  if (instr.operand(0)->shape().dtype() == ir::DType::kBF16) {
    if (instr.opcode() != ir::Opcode::kGroupedMatmulWeightGrad || instr.operand(0)->shape().rank() != 3) return 0;
    const int64_t P = instr.operand(0)->shape().dim(0), Gl = instr.operand(2)->shape().dim(1);
    if (P <= instr.shape().dim(0) / Gl) return 0;  // one entry per expert block: written directly
    return out_wide + static_cast<int64_t>(omp_get_max_threads()) * 4 * kBf16TileCols * kBf16TileCols;
  }
  int64_t bytes = out_wide;
  for (int k = 0; k < 2; ++k) {
    const ir::Shape& o = instr.operand(k)->shape();
    if (o.dtype() == ir::DType::kBF16) bytes += 4 * o.num_elements();
  }
  return bytes;
}

}  // namespace

std::vector<NativeKernelEntry> grouped_matmul_kernels() {
  return {{ir::Opcode::kGroupedMatmul, accepts, gmm_kernel, grouped_scratch_bytes},
          {ir::Opcode::kGroupedMatmulWeightGrad, accepts, tgmm_kernel, grouped_scratch_bytes},
          {ir::Opcode::kGroupedMatmul, accepts_batched, batched_gmm_kernel, grouped_scratch_bytes},
          {ir::Opcode::kGroupedMatmulWeightGrad, accepts_batched, batched_tgmm_kernel, grouped_scratch_bytes}};
}

}  // namespace kiln::backend::cpu
