// Native reductions over any set of dimensions (f32, f64). The input is viewed as
// [outer, reduced, inner]: when the reduced dimensions are one contiguous block that view is
// free (inner = 1 is a row reduction, outer = 1 a column reduction over leading dims, which
// accumulates whole rows at a time and vectorizes); otherwise a strided copy moves the
// reduced dimensions to the end first. Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/backend/cpu/bf16_convert.h"
#include "kiln/backend/cpu/kernel.h"
#include "kiln/backend/cpu/strided_copy.h"

namespace kiln::backend::cpu {

namespace {

using ir::Instr;
using ir::Opcode;

// out[o, i] = reduce_r in[o, r, i] for inner > 1: accumulate whole inner rows, in double.
template <typename T>
void reduce_middle(Opcode op, const T* in, T* out, int64_t outer, int64_t red, int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * red * inner > (1 << 15))
  for (int64_t chunk = 0; chunk < outer * ((inner + 1023) / 1024); ++chunk) {
    int64_t o = chunk / ((inner + 1023) / 1024);
    int64_t i0 = (chunk % ((inner + 1023) / 1024)) * 1024, i1 = std::min(inner, i0 + 1024);
    double acc[1024];
    bool is_sum = op == Opcode::kReduceSum, is_max = op == Opcode::kReduceMax;
    double init = is_sum ? 0.0 : is_max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    for (int64_t i = i0; i < i1; ++i) acc[i - i0] = init;
    for (int64_t r = 0; r < red; ++r) {
      const T* row = in + (o * red + r) * inner;
      if (is_sum) {
        for (int64_t i = i0; i < i1; ++i) acc[i - i0] += row[i];
      } else {
        for (int64_t i = i0; i < i1; ++i) {
          double v = row[i];
          double& a = acc[i - i0];
          a = (std::isnan(a) || std::isnan(v)) ? std::numeric_limits<double>::quiet_NaN() : (is_max ? std::max(a, v) : std::min(a, v));
        }
      }
    }
    for (int64_t i = i0; i < i1; ++i) out[o * inner + i] = static_cast<T>(acc[i - i0]);
  }
}

template <typename T>
void reduce_rows(Opcode op, const T* in, T* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * cols;
    if (op == Opcode::kReduceSum) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += row[c];
      out[r] = static_cast<T>(acc);
    } else {
      bool is_max = op == Opcode::kReduceMax;
      T acc = is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
      bool nan = false;
      for (int64_t c = 0; c < cols; ++c) {
        nan = nan || std::isnan(row[c]);
        acc = is_max ? std::max(acc, row[c]) : std::min(acc, row[c]);
      }
      out[r] = nan ? std::numeric_limits<T>::quiet_NaN() : acc;
    }
  }
}

Kernel reduce_kernel(const Instr& instr) {
  const auto& in_dims = instr.operand(0)->shape().dims();
  std::vector<int64_t> reduced = instr.attrs().get_ints("dims");
  std::sort(reduced.begin(), reduced.end());
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < static_cast<int64_t>(in_dims.size()); ++d) {
    if (!std::binary_search(reduced.begin(), reduced.end(), d)) kept.push_back(d);
  }
  std::vector<int64_t> perm = kept;
  perm.insert(perm.end(), reduced.begin(), reduced.end());
  // A contiguous block of reduced dims needs no data movement: [outer, red, inner].
  bool contiguous = !reduced.empty() && reduced.back() - reduced.front() + 1 == static_cast<int64_t>(reduced.size());
  int64_t outer = 1, red = 1, inner = 1;
  if (contiguous) {
    for (int64_t d = 0; d < reduced.front(); ++d) outer *= in_dims[d];
    for (int64_t d : reduced) red *= in_dims[d];
    for (size_t d = reduced.back() + 1; d < in_dims.size(); ++d) inner *= in_dims[d];
  }
  bool needs_transpose = !contiguous;
  int64_t rows = 1, cols = 1;
  for (int64_t d : kept) rows *= in_dims[d];
  for (int64_t d : reduced) cols *= in_dims[d];
  std::vector<int64_t> in_row = ir::row_major_strides(in_dims), permuted_dims, permuted_strides;
  for (int64_t p : perm) {
    permuted_dims.push_back(in_dims[p]);
    permuted_strides.push_back(in_row[p]);
  }
  Opcode op = instr.opcode();
  ir::Shape in_shape = instr.operand(0)->shape();
  // bf16 runs through via_f32 (bf16_convert.h): the kernel sees the widened f32 input.
  if (in_shape.dtype() == ir::DType::kBF16) in_shape = in_shape.with_dtype(ir::DType::kF32);
  bool f64 = in_shape.dtype() == ir::DType::kF64;
  return [=](std::span<const Value* const> in, Value& out) {
    const Buffer* src = &(*in[0])[0];
    if (contiguous && inner > 1) {
      if (f64) {
        reduce_middle(op, src->as<double>(), out[0].as<double>(), outer, red, inner);
      } else {
        reduce_middle(op, src->as<float>(), out[0].as<float>(), outer, red, inner);
      }
      return;
    }
    Buffer moved;
    if (needs_transpose) {
      moved = Buffer(in_shape.with_dims(permuted_dims));
      strided_copy(moved.data(), src->data(), ir::dtype_size(in_shape.dtype()), permuted_dims, permuted_strides, 0);
      src = &moved;
    }
    if (f64) {
      reduce_rows(op, src->as<double>(), out[0].as<double>(), rows, cols);
    } else {
      reduce_rows(op, src->as<float>(), out[0].as<float>(), rows, cols);
    }
  };
}

bool float_input(const Instr& instr) {
  ir::DType d = instr.operand(0)->shape().dtype();
  return d == ir::DType::kF32 || d == ir::DType::kF64;
}

bool bf16_input(const Instr& instr) { return instr.operand(0)->shape().dtype() == ir::DType::kBF16; }
Kernel bf16_reduce_kernel(const Instr& instr) { return via_f32(reduce_kernel(instr)); }

}  // namespace

std::vector<NativeKernelEntry> reduction_kernels() {
  return {
      {Opcode::kReduceSum, float_input, reduce_kernel},
      {Opcode::kReduceMax, float_input, reduce_kernel},
      {Opcode::kReduceMin, float_input, reduce_kernel},
      {Opcode::kReduceSum, bf16_input, bf16_reduce_kernel},
      {Opcode::kReduceMax, bf16_input, bf16_reduce_kernel},
      {Opcode::kReduceMin, bf16_input, bf16_reduce_kernel},
  };
}

}  // namespace kiln::backend::cpu
