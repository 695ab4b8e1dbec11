// Native reductions over any set of dimensions (f32, f64, bf16). The input is viewed as
// [outer, reduced, inner]: when the reduced dimensions are one contiguous block that view is
// free (inner = 1 is a row reduction, outer = 1 a column reduction over leading dims, which
// accumulates whole rows at a time and vectorizes); otherwise a strided copy moves the
// reduced dimensions to the end first. Sums accumulate in double; the work is cut as
// reduce_plan.h says (vector lanes for rows, split reduced dims when rows are few).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/backend/cpu/kernels/reduce_plan.h"
#include "kiln/backend/cpu/kernels/strided_copy.h"

namespace kiln::backend::cpu {

namespace {

using ir::Instr;
using ir::Opcode;

// One reduction step: sums accumulate in double; max and min keep the first NaN they see.
struct SumStep {
  template <typename A, typename X>
  static void apply(A& a, X x) { a += static_cast<A>(x); }
};
struct MaxStep {
  template <typename A, typename X>
  static void apply(A& a, X x) { const A v = static_cast<A>(x); a = (v > a || v != v) ? v : a; }
};
struct MinStep {
  template <typename A, typename X>
  static void apply(A& a, X x) { const A v = static_cast<A>(x); a = (v < a || v != v) ? v : a; }
};

// Element loads and stores: f32 and f64 as they are; bf16 bits widened to f32 as they are
// read and the result rounded once (through f32, as widening the input, reducing in f32 and
// rounding the f32 result would: the same bits, without the widened copy of the input).
template <typename T>
struct Elem {
  using Wide = T;
  static T load(T x) { return x; }
  template <typename A>
  static T store(A a) { return static_cast<T>(a); }
};
template <>
struct Elem<uint16_t> {
  using Wide = float;
  static float load(uint16_t bits) { return bf16_to_f32(bits); }
  template <typename A>
  static uint16_t store(A a) { return f32_to_bf16(static_cast<float>(a)); }
};

// out[o, i] = reduce_r in[o, r, i], cut into work items by plan_reduction (reduce_plan.h),
// in the same order as the generated input fusions.
template <typename Step, typename A, typename T>
void reduce_planned(const T* in, T* out, int64_t outer, int64_t red, int64_t inner, A init) {
  using E = Elem<T>;
  const ReducePlan p = plan_reduction(outer, red, inner);
  std::vector<A> partial(p.splits > 1 ? outer * p.splits * inner : 0);
#pragma omp parallel for schedule(static) if (outer * red * inner > 16384)
  for (int64_t w = 0; w < p.items(); ++w) {
    const int64_t s = w % p.splits, ob = w / p.splits, oi = ob / p.blocks;
    const int64_t i0 = (ob % p.blocks) * p.block, i1 = std::min(inner, i0 + p.block);
    const int64_t r0 = s * p.chunk, r1 = std::min(red, r0 + p.chunk);
    auto finish = [&](int64_t i, A a) {
      if (p.splits > 1) {
        partial[(oi * p.splits + s) * inner + i] = a;
      } else {
        out[oi * inner + i] = E::store(a);
      }
    };
    if (inner == 1) {
      const T* row = in + oi * red;
      A lane[kReduceLanes];
      for (int64_t j = 0; j < kReduceLanes; ++j) lane[j] = init;
      int64_t r = r0;
      for (; r + kReduceLanes <= r1; r += kReduceLanes) {
#pragma omp simd
        for (int64_t j = 0; j < kReduceLanes; ++j) Step::apply(lane[j], E::load(row[r + j]));
      }
      for (; r < r1; ++r) Step::apply(lane[0], E::load(row[r]));
      for (int64_t j = 1; j < kReduceLanes; ++j) Step::apply(lane[0], lane[j]);
      finish(0, lane[0]);
    } else {
      A acc[256];
      for (int64_t i = i0; i < i1; ++i) acc[i - i0] = init;
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = in + (oi * red + r) * inner;
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) Step::apply(acc[i - i0], E::load(row[i]));
      }
      for (int64_t i = i0; i < i1; ++i) finish(i, acc[i - i0]);
    }
  }
  if (p.splits > 1) {
#pragma omp parallel for schedule(static) if (outer * inner > 16384)
    for (int64_t k = 0; k < outer * inner; ++k) {
      const int64_t oi = k / inner, i = k % inner;
      A a = partial[oi * p.splits * inner + i];
      for (int64_t s = 1; s < p.splits; ++s) Step::apply(a, partial[(oi * p.splits + s) * inner + i]);
      out[k] = E::store(a);
    }
  }
}

template <typename T>
void reduce(Opcode op, const T* in, T* out, int64_t outer, int64_t red, int64_t inner) {
  using W = typename Elem<T>::Wide;
  constexpr W inf = std::numeric_limits<W>::infinity();
  switch (op) {
    case Opcode::kReduceSum: return reduce_planned<SumStep, double>(in, out, outer, red, inner, 0.0);
    case Opcode::kReduceMax: return reduce_planned<MaxStep, W>(in, out, outer, red, inner, -inf);
    default: return reduce_planned<MinStep, W>(in, out, outer, red, inner, inf);
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
        reduce(op, src->as<double>(), out[0].as<double>(), outer, red, inner);
      } else {
        reduce(op, src->as<float>(), out[0].as<float>(), outer, red, inner);
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
      reduce(op, src->as<double>(), out[0].as<double>(), rows, cols, 1);
    } else {
      reduce(op, src->as<float>(), out[0].as<float>(), rows, cols, 1);
    }
  };
}

bool float_input(const Instr& instr) {
  ir::DType d = instr.operand(0)->shape().dtype();
  return d == ir::DType::kF32 || d == ir::DType::kF64;
}

bool bf16_input(const Instr& instr) { return instr.operand(0)->shape().dtype() == ir::DType::kBF16; }

// bf16: a contiguous block of reduced dims (every bf16 reduction of the gpt-oss-small step:
// bias and sink gradients over [batch, seq]) reads the bf16 input directly; other sets of
// dims are moved by a strided copy first, which runs in f32 through via_f32.
Kernel bf16_reduce_kernel(const Instr& instr) {
  const auto& in_dims = instr.operand(0)->shape().dims();
  std::vector<int64_t> reduced = instr.attrs().get_ints("dims");
  std::sort(reduced.begin(), reduced.end());
  const bool contiguous =
      !reduced.empty() && reduced.back() - reduced.front() + 1 == static_cast<int64_t>(reduced.size());
  if (!contiguous || instr.shape().dtype() != ir::DType::kBF16) return via_f32(reduce_kernel(instr));
  int64_t outer = 1, red = 1, inner = 1;
  for (int64_t d = 0; d < reduced.front(); ++d) outer *= in_dims[d];
  for (int64_t d : reduced) red *= in_dims[d];
  for (size_t d = reduced.back() + 1; d < in_dims.size(); ++d) inner *= in_dims[d];
  const Opcode op = instr.opcode();
  return [=](std::span<const Value* const> in, Value& out) {
    reduce(op, (*in[0])[0].as<uint16_t>(), out[0].as<uint16_t>(), outer, red, inner);
  };
}

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
