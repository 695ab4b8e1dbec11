// Native kernels for pure data movement (any dtype): broadcast, transpose, reshape, copy,
// slice, concatenate, gather and scatter_add. Each precomputes strides at compile time.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/backend/cpu/kernels/strided_copy.h"
#include "kiln/base/check.h"

namespace kiln::backend::cpu {

namespace {

using ir::Instr;

bool any(const Instr&) { return true; }

Kernel broadcast_kernel(const Instr& instr) {
  const auto& out_dims = instr.shape().dims();
  const auto& in_shape = instr.operand(0)->shape();
  std::vector<int64_t> in_row = ir::row_major_strides(in_shape.dims());
  std::vector<int64_t> strides(out_dims.size(), 0);
  const auto& dims = instr.attrs().get_ints("dims");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (in_shape.dim(static_cast<int>(i)) == out_dims[dims[i]]) strides[dims[i]] = in_row[i];
  }
  int size = ir::dtype_size(in_shape.dtype());
  return [out_dims, strides, size](std::span<const Value* const> in, Value& out) {
    strided_copy(out[0].data(), (*in[0])[0].data(), size, out_dims, strides, 0);
  };
}

Kernel transpose_kernel(const Instr& instr) {
  const auto& perm = instr.attrs().get_ints("perm");
  std::vector<int64_t> in_row = ir::row_major_strides(instr.operand(0)->shape().dims());
  std::vector<int64_t> strides;
  for (int64_t p : perm) strides.push_back(in_row[p]);
  std::vector<int64_t> out_dims = instr.shape().dims();
  int size = ir::dtype_size(instr.shape().dtype());
  return [out_dims, strides, size](std::span<const Value* const> in, Value& out) {
    strided_copy(out[0].data(), (*in[0])[0].data(), size, out_dims, strides, 0);
  };
}

// Reshape and copy share storage with their operand: no data moves.
Kernel view_kernel(const Instr& instr) {
  ir::Shape shape = instr.shape();
  return [shape](std::span<const Value* const> in, Value& out) { out[0] = (*in[0])[0].view(shape); };
}

Kernel slice_kernel(const Instr& instr) {
  const auto& start = instr.attrs().get_ints("start");
  std::vector<int64_t> steps = instr.attrs().get_ints_or("strides", std::vector<int64_t>(start.size(), 1));
  std::vector<int64_t> in_row = ir::row_major_strides(instr.operand(0)->shape().dims());
  std::vector<int64_t> strides(start.size());
  int64_t offset = 0;
  for (size_t d = 0; d < start.size(); ++d) {
    strides[d] = in_row[d] * steps[d];
    offset += start[d] * in_row[d];
  }
  std::vector<int64_t> out_dims = instr.shape().dims();
  int size = ir::dtype_size(instr.shape().dtype());
  return [out_dims, strides, offset, size](std::span<const Value* const> in, Value& out) {
    strided_copy(out[0].data(), (*in[0])[0].data(), size, out_dims, strides, offset);
  };
}

Kernel concatenate_kernel(const Instr& instr) {
  int64_t dim = instr.attrs().get_int("dim");
  std::vector<int64_t> out_row = ir::row_major_strides(instr.shape().dims());
  int size = ir::dtype_size(instr.shape().dtype());
  struct Piece {
    std::vector<int64_t> dims, in_strides;
    int64_t out_offset;
  };
  std::vector<Piece> pieces;
  int64_t at = 0;
  for (const Instr* o : instr.operands()) {
    pieces.push_back({o->shape().dims(), ir::row_major_strides(o->shape().dims()), at * out_row[dim]});
    at += o->shape().dim(static_cast<int>(dim));
  }
  return [pieces, out_row, size](std::span<const Value* const> in, Value& out) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      strided_copy(out[0].data(), (*in[i])[0].data(), size, pieces[i].dims, pieces[i].in_strides, 0, out_row,
                   pieces[i].out_offset);
    }
  };
}

// n elements of `size` bytes, each a copy of *value. Typed so the loop vectorizes: a
// memcpy of a run-time size per element ran at about 1 GB/s (2.2 ms for the backward's
// f32[2,512,8,64] pads of RoPE's halves, 16 per gpt-oss-small step).
template <typename T>
void fill_typed(std::byte* dst, const void* value, int64_t n) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  std::fill_n(reinterpret_cast<T*>(dst), n, v);
}

void fill_range(std::byte* dst, const void* value, int size, int64_t n) {
  switch (size) {
    case 1: fill_typed<uint8_t>(dst, value, n); break;
    case 2: fill_typed<uint16_t>(dst, value, n); break;
    case 4: fill_typed<uint32_t>(dst, value, n); break;
    case 8: fill_typed<uint64_t>(dst, value, n); break;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * size, value, static_cast<size_t>(size));
  }
}

// Large fills are split into one contiguous range per thread (the pads of [2,512,8,64]
// fill 2 MiB before the interior copy).
void fill_elements(std::byte* dst, const void* value, int size, int64_t n) {
#pragma omp parallel if (n > (1 << 16))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    fill_range(dst + i0 * size, value, size, i1 - i0);
  }
}

// pad: fill with the padding value, then copy the operand into the strided interior.
Kernel pad_kernel(const Instr& instr) {
  const auto& in_dims = instr.operand(0)->shape().dims();
  const auto& low = instr.attrs().get_ints("low");
  std::vector<int64_t> interior = instr.attrs().get_ints_or("interior", std::vector<int64_t>(in_dims.size(), 0));
  std::vector<int64_t> out_row = ir::row_major_strides(instr.shape().dims());
  std::vector<int64_t> out_strides(in_dims.size());
  int64_t out_offset = 0;
  for (size_t d = 0; d < in_dims.size(); ++d) {
    out_strides[d] = out_row[d] * (interior[d] + 1);
    out_offset += low[d] * out_row[d];
  }
  std::vector<int64_t> in_row = ir::row_major_strides(in_dims);
  int64_t n = instr.shape().num_elements();
  int size = ir::dtype_size(instr.shape().dtype());
  return [=](std::span<const Value* const> in, Value& out) {
    std::byte* dst = static_cast<std::byte*>(out[0].data());
    fill_elements(dst, (*in[1])[0].data(), size, n);
    strided_copy(dst, (*in[0])[0].data(), size, in_dims, in_row, 0, out_strides, out_offset);
  };
}

Kernel iota_kernel(const Instr& instr) {
  ir::Shape shape = instr.shape();
  int64_t dim = instr.attrs().get_int("dim");
  int64_t inner = 1;
  for (int d = static_cast<int>(dim) + 1; d < shape.rank(); ++d) inner *= shape.dim(d);
  int64_t extent = shape.dim(static_cast<int>(dim));
  return [shape, inner, extent](std::span<const Value* const>, Value& out) {
    Buffer& b = out[0];
    const int64_t n = b.num_elements();
    // Integer iotas (the MoE's positions and expert ids) are written typed, as runs of
    // `inner` equal values, without a division per element; Buffer::set converts through
    // double per element.
    if (shape.dtype() == ir::DType::kS32) {
      int32_t* y = b.as<int32_t>();
      for (int64_t at = 0; at < n;) {
        for (int64_t e = 0; e < extent; ++e, at += inner) std::fill_n(y + at, inner, static_cast<int32_t>(e));
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) b.set(i, static_cast<double>((i / inner) % extent));
  };
}

// gather/scatter_add viewed as x [batch, pre, n, post] and idx [batch, m]: the result is
// [batch, pre, m, post] (gather) — see ops/builder.h for the semantics.
struct IndexGeometry {
  int64_t batch = 1, pre = 1, n = 1, post = 1, m = 1;
};

IndexGeometry index_geometry(const Instr& instr) {
  const auto& x = instr.operand(0)->shape().dims();
  const auto& idx = instr.operand(1)->shape().dims();
  int64_t axis = instr.attrs().get_int("axis");
  int64_t batch_dims = instr.attrs().get_int_or("batch_dims", 0);
  IndexGeometry g;
  for (int64_t d = 0; d < batch_dims; ++d) g.batch *= x[d];
  for (int64_t d = batch_dims; d < axis; ++d) g.pre *= x[d];
  g.n = x[axis];
  for (size_t d = axis + 1; d < x.size(); ++d) g.post *= x[d];
  for (size_t d = batch_dims; d < idx.size(); ++d) g.m *= idx[d];
  return g;
}

// s32 or u32 indices, the dtype looked up once per call instead of once per index (the
// scatter scans every index once per row block).
struct IndexReader {
  const void* data;
  bool s32;
  explicit IndexReader(const Buffer& idx) : data(idx.data()), s32(idx.shape().dtype() == ir::DType::kS32) {}
  int64_t operator[](int64_t i) const {
    return s32 ? static_cast<const int32_t*>(data)[i] : static_cast<int64_t>(static_cast<const uint32_t*>(data)[i]);
  }
};

// Copies whole rows of `row_bytes` (any dtype: gathering only moves data). Parallel over
// every result row, one contiguous range per thread walked with counters (a division per
// row cost as much as the 1 KiB copy): the MoE's gathers have batch = pre = 1 and 2048 rows.
void gather_rows(const IndexGeometry& g, const std::byte* x, const IndexReader idx, std::byte* out, int64_t row_bytes) {
  const int64_t rows = g.batch * g.pre * g.m;
  if (rows == 0) return;
#pragma omp parallel if (rows * row_bytes > (1 << 17))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    int64_t bp = r0 / g.m, j = r0 % g.m, b = bp / g.pre, p = bp % g.pre;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t k = std::clamp<int64_t>(idx[b * g.m + j], 0, g.n - 1);
      std::memcpy(out + r * row_bytes, x + (bp * g.n + k) * row_bytes, static_cast<size_t>(row_bytes));
      if (++j == g.m) {  // next (batch, pre) slice
        j = 0;
        ++bp;
        if (++p == g.pre) {
          p = 0;
          ++b;
        }
      }
    }
  }
}

// scatter_add as work items: each (batch, pre) slice's n destination rows are cut into
// blocks, and an item copies its block of the operand into the result, then scans all m
// indices of its slice and adds the update rows that land in the block, in index order.
// Every destination element therefore sums the same terms in the same order however the
// rows are cut, so the bits do not depend on the thread count. Slices alone are the items
// when there are enough of them (the loss gradient's one-hot: 1024 slices of [4096, 1]);
// the MoE combine ([2048, 512] rows into [1024, 512], one slice) is cut into row blocks.
struct ScatterPlan {
  int64_t blocks = 1;      // row blocks per slice
  int64_t block_rows = 1;  // rows per block (the last may be short)
};

// Below this many elements moved (operand rows copied plus update rows added) the kernel
// runs on one thread.
constexpr int64_t kScatterParallelElements = 1 << 15;

ScatterPlan plan_scatter(const IndexGeometry& g, int threads) {
  ScatterPlan p;
  const int64_t slices = g.batch * g.pre;
  p.block_rows = std::max<int64_t>(g.n, 1);
  if (threads > 1 && slices < threads && g.n > 1) {
    p.blocks = std::min<int64_t>(g.n, (threads + slices - 1) / slices);
    p.block_rows = (g.n + p.blocks - 1) / p.blocks;
    p.blocks = (g.n + p.block_rows - 1) / p.block_rows;
  }
  return p;
}

inline float widen(float x) { return x; }
inline double widen(double x) { return x; }
inline float widen(uint16_t bf16_bits) { return bf16_to_f32(bf16_bits); }

// Adds the update rows of slice `s` whose index falls in [k0, k1) into rows (row k at
// sum + (k - k0) * post). U is T, or bf16 bits summed into f32.
template <typename T, typename U>
void add_rows_in_range(const IndexGeometry& g, int64_t s, const U* upd, const IndexReader idx, T* sum, int64_t k0,
                       int64_t k1) {
  const int64_t b = s / g.pre;
  for (int64_t j = 0; j < g.m; ++j) {
    const int64_t k = idx[b * g.m + j];
    if (k < k0 || k >= k1) continue;  // another block's row, or out of range (dropped)
    T* dst = sum + (k - k0) * g.post;
    const U* src = upd + (s * g.m + j) * g.post;
    for (int64_t q = 0; q < g.post; ++q) dst[q] += widen(src[q]);
  }
}

// out = x, then out[rows of idx] += upd rows (f32 or f64 throughout).
template <typename T>
void scatter_add_rows(const IndexGeometry& g, const T* x, const T* upd, const IndexReader idx, T* out) {
  const int64_t slices = g.batch * g.pre;
  const bool parallel = slices * (g.n + g.m) * g.post > kScatterParallelElements;
  const ScatterPlan p = plan_scatter(g, parallel ? omp_get_max_threads() : 1);
#pragma omp parallel for schedule(static) if (parallel && slices * p.blocks > 1)
  for (int64_t w = 0; w < slices * p.blocks; ++w) {
    const int64_t s = w / p.blocks, k0 = (w % p.blocks) * p.block_rows, k1 = std::min(g.n, k0 + p.block_rows);
    const int64_t at = (s * g.n + k0) * g.post;
    if (x != out) std::copy(x + at, x + at + (k1 - k0) * g.post, out + at);  // (in place: already there)
    add_rows_in_range(g, s, upd, idx, out + at, k0, k1);
  }
}

// bf16: per block, the operand rows widened into an f32 sum, the bf16 update rows added as
// they are read, the sum rounded once into the result (as the interpreter rounds the exact
// sum once). The f32 sum covers at most kBf16SumElements of the block at a time (rows
// re-scan the indices per piece), so it is a small per-thread buffer that stays in cache
// instead of an f32 copy of the whole operand.
constexpr int64_t kBf16SumElements = 1 << 16;

void bf16_scatter_add_rows(const IndexGeometry& g, const uint16_t* x, const uint16_t* upd, const IndexReader idx,
                           uint16_t* out) {
  const int64_t slices = g.batch * g.pre;
  const bool parallel = slices * (g.n + g.m) * g.post > kScatterParallelElements;
  const ScatterPlan p = plan_scatter(g, parallel ? omp_get_max_threads() : 1);
  const int64_t piece_rows = std::clamp<int64_t>(kBf16SumElements / std::max<int64_t>(g.post, 1), 1, p.block_rows);
#pragma omp parallel if (parallel && slices * p.blocks > 1)
  {
    std::vector<float> sum(static_cast<size_t>(piece_rows * g.post));
#pragma omp for schedule(static)
    for (int64_t w = 0; w < slices * p.blocks; ++w) {
      const int64_t s = w / p.blocks, b0 = (w % p.blocks) * p.block_rows, b1 = std::min(g.n, b0 + p.block_rows);
      for (int64_t k0 = b0; k0 < b1; k0 += piece_rows) {
        const int64_t k1 = std::min(b1, k0 + piece_rows), at = (s * g.n + k0) * g.post, len = (k1 - k0) * g.post;
        for (int64_t i = 0; i < len; ++i) sum[i] = bf16_to_f32(x[at + i]);
        add_rows_in_range(g, s, upd, idx, sum.data(), k0, k1);
        for (int64_t i = 0; i < len; ++i) out[at + i] = f32_to_bf16(sum[i]);
      }
    }
  }
}

bool bf16_data(const Instr& instr) { return instr.shape().dtype() == ir::DType::kBF16; }

bool float_data(const Instr& instr) {
  ir::DType d = instr.operand(0)->shape().dtype();
  return d == ir::DType::kF32 || d == ir::DType::kF64;
}

Kernel gather_kernel(const Instr& instr) {
  IndexGeometry g = index_geometry(instr);
  int64_t row_bytes = g.post * ir::dtype_size(instr.shape().dtype());
  return [g, row_bytes](std::span<const Value* const> in, Value& out) {
    gather_rows(g, static_cast<const std::byte*>((*in[0])[0].data()), IndexReader((*in[1])[0]), static_cast<std::byte*>(out[0].data()),
                row_bytes);
  };
}

Kernel scatter_add_kernel(const Instr& instr) {
  IndexGeometry g = index_geometry(instr);
  bool f64 = instr.shape().dtype() == ir::DType::kF64;
  return [g, f64](std::span<const Value* const> in, Value& out) {
    if (f64) {
      scatter_add_rows(g, (*in[0])[0].as<double>(), (*in[2])[0].as<double>(), IndexReader((*in[1])[0]), out[0].as<double>());
    } else {
      scatter_add_rows(g, (*in[0])[0].as<float>(), (*in[2])[0].as<float>(), IndexReader((*in[1])[0]), out[0].as<float>());
    }
  };
}

// bf16 operand and updates, summed in f32 without a widened copy of either (the updates
// are the large input: [N k, D] expert rows into [E, D] bias gradients or [N, D] tokens).
Kernel bf16_scatter_add_kernel(const Instr& instr) {
  IndexGeometry g = index_geometry(instr);
  return [g](std::span<const Value* const> in, Value& out) {
    const Buffer& x = (*in[0])[0];
    const Buffer& updates = (*in[2])[0];
    KILN_CHECK(x.shape().dtype() == ir::DType::kBF16 && updates.shape().dtype() == ir::DType::kBF16)
        << "bf16 scatter_add of " << x.shape().to_string() << " and " << updates.shape().to_string();
    bf16_scatter_add_rows(g, x.as<uint16_t>(), updates.as<uint16_t>(), IndexReader((*in[1])[0]), out[0].as<uint16_t>());
  };
}

}  // namespace

std::vector<NativeKernelEntry> data_movement_kernels() {
  return {
      {ir::Opcode::kBroadcast, any, broadcast_kernel},
      {ir::Opcode::kTranspose, any, transpose_kernel},
      {ir::Opcode::kReshape, any, view_kernel},
      {ir::Opcode::kCopy, any, view_kernel},
      {ir::Opcode::kStopGradient, any, view_kernel},
      {ir::Opcode::kSlice, any, slice_kernel},
      {ir::Opcode::kConcatenate, any, concatenate_kernel},
      {ir::Opcode::kPad, any, pad_kernel},
      {ir::Opcode::kIota, any, iota_kernel},
      {ir::Opcode::kGather, any, gather_kernel},
      {ir::Opcode::kScatterAdd, float_data, scatter_add_kernel},
      {ir::Opcode::kScatterAdd, bf16_data, bf16_scatter_add_kernel},
  };
}

}  // namespace kiln::backend::cpu
