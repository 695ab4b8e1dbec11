// Native reductions over any set of dimensions (f32, f64). Reduced dimensions are first
// moved to the end (a strided copy when they are not already trailing), so the loop is
// always "one output element per contiguous row". Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/backend/cpu/kernel.h"
#include "kiln/backend/cpu/strided_copy.h"

namespace kiln::backend::cpu {

namespace {

using ir::Instr;
using ir::Opcode;

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
  bool needs_transpose = false;
  for (size_t i = 0; i < perm.size(); ++i) needs_transpose = needs_transpose || perm[i] != static_cast<int64_t>(i);
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
  bool f64 = in_shape.dtype() == ir::DType::kF64;
  return [=](std::span<const Value* const> in, Value& out) {
    const Buffer* src = &(*in[0])[0];
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

}  // namespace

std::vector<NativeKernelEntry> reduction_kernels() {
  return {
      {Opcode::kReduceSum, float_input, reduce_kernel},
      {Opcode::kReduceMax, float_input, reduce_kernel},
      {Opcode::kReduceMin, float_input, reduce_kernel},
  };
}

}  // namespace kiln::backend::cpu
