#include "kiln/backend/cpu/kernels/strided_copy.h"

#include <omp.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include "kiln/ir/shape.h"

namespace kiln::backend::cpu {

namespace {

// Below this many elements a copy stays on one thread (a parallel region costs a few µs).
constexpr int64_t kParallelElements = 1 << 16;

// Threads for a copy of n elements: one when small, else the OpenMP team.
int copy_threads(int64_t n) { return n > kParallelElements ? omp_get_max_threads() : 1; }

// Rows [r0, r1) of the copy viewed as [rows, inner] (the last dim is the row): each thread
// takes one contiguous range and walks it with an odometer, so no row pays for a division
// per dim (slices and concatenation pieces of [2,512,8,32] have 8192 rows of 32).
template <typename T>
void copy_row_range(T* out, const T* in, const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
                    int64_t in_offset, const std::vector<int64_t>& out_strides, int64_t out_offset, int64_t r0,
                    int64_t r1) {
  const int rank = static_cast<int>(dims.size());
  const int64_t inner = dims[rank - 1];
  const int64_t in_step = in_strides[rank - 1];
  const int64_t out_step = out_strides[rank - 1];
  std::vector<int64_t> idx(rank > 1 ? rank - 1 : 0, 0);
  int64_t src = in_offset, dst = out_offset;
  for (int64_t rem = r0, d = rank - 2; d >= 0; --d) {
    idx[d] = rem % dims[d];
    rem /= dims[d];
    src += idx[d] * in_strides[d];
    dst += idx[d] * out_strides[d];
  }
  for (int64_t r = r0; r < r1; ++r) {
    if (in_step == 1 && out_step == 1) {
      std::memcpy(out + dst, in + src, static_cast<size_t>(inner) * sizeof(T));
    } else if (in_step == 0 && out_step == 1) {
      std::fill_n(out + dst, inner, in[src]);  // a broadcast row: vectorized stores
    } else {
      for (int64_t k = 0; k < inner; ++k) out[dst + k * out_step] = in[src + k * in_step];
    }
    for (int d = rank - 2; d >= 0; --d) {
      src += in_strides[d];
      dst += out_strides[d];
      if (++idx[d] < dims[d]) break;
      src -= in_strides[d] * dims[d];
      dst -= out_strides[d] * dims[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
void copy_rows(T* out, const T* in, const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
               int64_t in_offset, const std::vector<int64_t>& out_strides, int64_t out_offset) {
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    out[out_offset] = in[in_offset];
    return;
  }
  int64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= dims[d];
  const int threads = static_cast<int>(std::min<int64_t>(copy_threads(rows * dims[rank - 1]), std::max<int64_t>(rows, 1)));
  if (threads == 1) {  // no parallel region at all: a concatenation of 155 scalars calls this 155 times
    copy_row_range(out, in, dims, in_strides, in_offset, out_strides, out_offset, 0, rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    copy_row_range(out, in, dims, in_strides, in_offset, out_strides, out_offset, rows * t / nt, rows * (t + 1) / nt);
  }
}

// Tile edge of the blocked transpose: 16 x 16 elements touch 16 cache lines on each side.
constexpr int64_t kTile = 16;

#if defined(__AVX512F__)
// out[j * out_stride + i] = in[i * in_stride + j] for i, j < 16, 4-byte elements: sixteen
// row loads, the 16 x 16 block transposed in registers (pairs, then quads, then 128-bit
// lanes twice), sixteen row stores. The scalar loop reads a new cache line per element and
// ran a 512 x 32,000 f32 transpose at 7.5 GB/s.
// GCC 12 warns that the shuffles' internal _mm512_undefined_ps() is uninitialized (it is
// meant to be: the unmasked shuffle never reads it).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <typename T>
void transpose_16x16(const T* in, int64_t in_stride, T* out, int64_t out_stride) {
  static_assert(sizeof(T) == 4);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(in + i * in_stride));
  // Interleave row pairs: t[2k] holds (r[2k][j], r[2k+1][j]) for the low j of each 128-bit lane.
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // Quads of rows within each 128-bit lane.
  for (int k = 0; k < 4; ++k) {
    r[4 * k + 0] = _mm512_shuffle_ps(t[4 * k + 0], t[4 * k + 2], 0x44);
    r[4 * k + 1] = _mm512_shuffle_ps(t[4 * k + 0], t[4 * k + 2], 0xEE);
    r[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    r[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  // 128-bit lanes: quads of rows 0-3 with 4-7, and 8-11 with 12-15.
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      t[8 * h + k] = _mm512_shuffle_f32x4(r[8 * h + k], r[8 * h + k + 4], 0x88);
      t[8 * h + k + 4] = _mm512_shuffle_f32x4(r[8 * h + k], r[8 * h + k + 4], 0xDD);
    }
  }
  // And the halves: rows 0-7 with 8-15.
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
    r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xDD);
  }
  for (int j = 0; j < 16; ++j) _mm512_storeu_ps(reinterpret_cast<float*>(out + j * out_stride), r[j]);
}
#pragma GCC diagnostic pop
#endif

// A transpose whose last result dim `z` is strided in the input while another result dim
// `a` is contiguous there: row by row, every read would touch a new cache line (a result
// [8,64,512] from [512,8,64] reads with a stride of 2 KiB). Instead copy kTile x kTile
// tiles of the (a, z) plane, reading along a and writing along z inside the tile; the
// other dims and the tiles are the parallel work items.
template <typename T>
void copy_tiled(T* out, const T* in, const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
                int64_t in_offset, const std::vector<int64_t>& out_strides, int64_t out_offset, int a) {
  const int rank = static_cast<int>(dims.size());
  const int z = rank - 1;
  std::vector<int> rest;
  int64_t outer = 1;
  for (int d = 0; d < z; ++d) {
    if (d != a) {
      rest.push_back(d);
      outer *= dims[d];
    }
  }
  const int64_t na = dims[a], nz = dims[z], ta = (na + kTile - 1) / kTile, tz = (nz + kTile - 1) / kTile;
  const int64_t in_a = in_strides[a], in_z = in_strides[z], out_a = out_strides[a], out_z = out_strides[z];
  const int64_t items = outer * ta * tz;
  const int threads = copy_threads(outer * na * nz);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t w = 0; w < items; ++w) {
    const int64_t bz = w % tz, ba = (w / tz) % ta;
    int64_t rem = w / (tz * ta), src = in_offset, dst = out_offset;
    for (int i = static_cast<int>(rest.size()) - 1; i >= 0; --i) {
      const int d = rest[i];
      const int64_t v = rem % dims[d];
      rem /= dims[d];
      src += v * in_strides[d];
      dst += v * out_strides[d];
    }
    const int64_t a0 = ba * kTile, a1 = std::min(na, a0 + kTile), z0 = bz * kTile, z1 = std::min(nz, z0 + kTile);
#if defined(__AVX512F__)
    if constexpr (sizeof(T) == 4) {
      if (a1 - a0 == kTile && z1 - z0 == kTile && in_a == 1 && out_z == 1) {
        transpose_16x16(in + src + a0 + z0 * in_z, in_z, out + dst + a0 * out_a + z0, out_a);
        continue;
      }
    }
#endif
    for (int64_t ia = a0; ia < a1; ++ia) {
      const T* s = in + src + ia * in_a;
      T* o = out + dst + ia * out_a;
      for (int64_t iz = z0; iz < z1; ++iz) o[iz * out_z] = s[iz * in_z];
    }
  }
}

// The result dim to tile with the last one, or -1 when rows are the better walk: the last
// dim must be strided in the input (and big enough to tile) and some other dim contiguous.
int tile_dim(const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides) {
  const int rank = static_cast<int>(dims.size());
  if (rank < 2 || dims[rank - 1] < kTile || in_strides[rank - 1] == 1 || in_strides[rank - 1] == 0) return -1;
  for (int d = rank - 2; d >= 0; --d) {
    if (in_strides[d] == 1 && dims[d] >= kTile) return d;
  }
  return -1;
}

template <typename T>
void copy_any(T* out, const T* in, const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
              int64_t in_offset, const std::vector<int64_t>& out_strides, int64_t out_offset) {
  const int a = tile_dim(dims, in_strides);
  if (a >= 0) {
    copy_tiled(out, in, dims, in_strides, in_offset, out_strides, out_offset, a);
  } else {
    copy_rows(out, in, dims, in_strides, in_offset, out_strides, out_offset);
  }
}

}  // namespace

void strided_copy(void* out, const void* in, int element_size, const std::vector<int64_t>& out_dims,
                  const std::vector<int64_t>& in_strides, int64_t in_offset,
                  const std::vector<int64_t>& out_strides_given, int64_t out_offset) {
  for (int64_t d : out_dims) {
    if (d == 0) return;
  }
  std::vector<int64_t> out_strides = out_strides_given.empty() ? ir::row_major_strides(out_dims) : out_strides_given;
  switch (element_size) {
    case 1: copy_any(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
    case 2: copy_any(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
    case 4: copy_any(static_cast<uint32_t*>(out), static_cast<const uint32_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
    default: copy_any(static_cast<uint64_t*>(out), static_cast<const uint64_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
  }
}

}  // namespace kiln::backend::cpu
