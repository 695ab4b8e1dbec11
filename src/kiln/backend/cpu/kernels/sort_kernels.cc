// Native sort and top-k along the last dimension (ops/sort_ops.cc has the semantics):
//
//   x [rows, n] (any leading dims flattened) -> values [rows, m], s32 indices [rows, m]
//   sort:  m = n, stable (equal keys keep their index order), ascending or descending
//   topk:  m = k, the k largest in descending order, ties to the lower index
//
// NaN orders above every number, as in the reference evaluation. Keys are read as their
// own type (f32, f64, s32, or bf16 widened to f32: exact), and the values are copied as
// bytes from the positions the indices name, so the result is the reference's bit for bit.
// In the MoE step these order small integer rows (a shard's (token, slot) pairs by expert)
// and the router's logits ([tokens, E], top-k of a few): rows run in parallel, each row
// sorted by std::stable_sort on indices, top-k kept by insertion into k slots.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/backend/cpu/kernels/kernel.h"

namespace kiln::backend::cpu {

namespace {

using ir::DType;
using ir::Instr;
using ir::Opcode;

// a < b in the total order where NaN is the largest value (all NaNs equal).
template <typename K>
bool key_less(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// The keys of one row in a type the comparisons can use directly.
template <typename K>
void load_row(const Buffer& x, int64_t offset, int64_t n, K* keys) {
  if (x.shape().dtype() == DType::kBF16) {
    const uint16_t* src = x.as<uint16_t>() + offset;
    for (int64_t j = 0; j < n; ++j) keys[j] = static_cast<K>(bf16_to_f32(src[j]));
  } else {
    std::memcpy(keys, static_cast<const std::byte*>(x.data()) + offset * static_cast<int64_t>(sizeof(K)),
                static_cast<size_t>(n) * sizeof(K));
  }
}

// Writes values (as bytes of the operand's element) and s32 indices for one row's order.
void store_row(const std::byte* row, int64_t elem, const int32_t* order, int64_t m, std::byte* values, int32_t* indices) {
  for (int64_t j = 0; j < m; ++j) {
    std::memcpy(values + j * elem, row + order[j] * elem, static_cast<size_t>(elem));
    indices[j] = order[j];
  }
}

struct RowGeometry {
  int64_t rows = 0, n = 0, m = 0, elem = 0;
};

RowGeometry geometry(const Instr& instr, int64_t m) {
  const ir::Shape& x = instr.operand(0)->shape();
  RowGeometry g;
  g.n = x.dims().back();
  g.rows = g.n == 0 ? 0 : x.num_elements() / g.n;
  g.m = m;
  g.elem = ir::dtype_size(x.dtype());
  return g;
}

// Parallel over rows when there is enough work to share.
bool worth_threads(const RowGeometry& g) { return g.rows > 1 && g.rows * g.n > (1 << 14); }

template <typename K>
void sort_rows(const RowGeometry& g, bool descending, const Buffer& x, Value& out) {
  const std::byte* src = static_cast<const std::byte*>(x.data());
  std::byte* values = static_cast<std::byte*>(out[0].data());
  int32_t* indices = out[1].as<int32_t>();
#pragma omp parallel if (worth_threads(g))
  {
    std::vector<K> keys(g.n);
    std::vector<int32_t> order(g.n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < g.rows; ++r) {
      load_row(x, r * g.n, g.n, keys.data());
      std::iota(order.begin(), order.end(), 0);
      if (descending) {
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key_less(keys[b], keys[a]); });
      } else {
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key_less(keys[a], keys[b]); });
      }
      store_row(src + r * g.n * g.elem, g.elem, order.data(), g.n, values + r * g.n * g.elem, indices + r * g.n);
    }
  }
}

template <typename K>
void topk_rows(const RowGeometry& g, const Buffer& x, Value& out) {
  const std::byte* src = static_cast<const std::byte*>(x.data());
  std::byte* values = static_cast<std::byte*>(out[0].data());
  int32_t* indices = out[1].as<int32_t>();
#pragma omp parallel if (worth_threads(g))
  {
    std::vector<K> keys(g.n), best(g.m);
    std::vector<int32_t> order(g.m);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < g.rows; ++r) {
      load_row(x, r * g.n, g.n, keys.data());
      // Scanning in index order, a key enters only if strictly larger than one kept, so
      // among equal keys the lower index stays ahead (the reference's tie rule).
      int64_t kept = 0;
      for (int64_t j = 0; j < g.n; ++j) {
        const K v = keys[j];
        if (kept == g.m && !key_less(best[g.m - 1], v)) continue;
        int64_t pos = kept < g.m ? kept++ : g.m - 1;
        while (pos > 0 && key_less(best[pos - 1], v)) {
          best[pos] = best[pos - 1];
          order[pos] = order[pos - 1];
          --pos;
        }
        best[pos] = v;
        order[pos] = static_cast<int32_t>(j);
      }
      store_row(src + r * g.n * g.elem, g.elem, order.data(), g.m, values + r * g.m * g.elem, indices + r * g.m);
    }
  }
}

// Calls f with a key type for the operand's dtype.
template <typename F>
void with_key_type(DType d, F&& f) {
  switch (d) {
    case DType::kF64: return f(double{});
    case DType::kS32: return f(int32_t{});
    default: return f(float{});  // f32, bf16 (widened exactly)
  }
}

bool sortable(const Instr& instr) {
  const ir::Shape& x = instr.operand(0)->shape();
  const DType d = x.dtype();
  return x.rank() >= 1 && (d == DType::kF32 || d == DType::kF64 || d == DType::kS32 || d == DType::kBF16);
}

Kernel sort_kernel(const Instr& instr) {
  const RowGeometry g = geometry(instr, instr.operand(0)->shape().dims().back());
  const bool descending = instr.attrs().get_int_or("descending", 0) != 0;
  const DType d = instr.operand(0)->shape().dtype();
  return [g, descending, d](std::span<const Value* const> in, Value& out) {
    with_key_type(d, [&](auto key) { sort_rows<decltype(key)>(g, descending, (*in[0])[0], out); });
  };
}

Kernel topk_kernel(const Instr& instr) {
  const RowGeometry g = geometry(instr, instr.attrs().get_int("k"));
  const DType d = instr.operand(0)->shape().dtype();
  return [g, d](std::span<const Value* const> in, Value& out) {
    with_key_type(d, [&](auto key) { topk_rows<decltype(key)>(g, (*in[0])[0], out); });
  };
}

}  // namespace

std::vector<NativeKernelEntry> sort_kernels() {
  return {
      {Opcode::kSort, sortable, sort_kernel},
      {Opcode::kTopK, sortable, topk_kernel},
  };
}

}  // namespace kiln::backend::cpu
