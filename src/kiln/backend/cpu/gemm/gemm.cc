// dot_general lowered to library GEMMs. Operands are viewed as [batch, M, K] / [batch, K,
// N]; when an operand's layout is that or its per-batch transpose, the transpose is folded
// into the call, otherwise one strided copy brings it into shape first.
//   f32 operands:  oneDNN's sgemm (about 94% of this CPU's f32 peak on transformer shapes).
//   bf16 operands: oneDNN's bf16 matmul primitive (bf16 dot-product instructions, f32
//                  accumulation, about 2x the f32 rate), writing the f32 or bf16 result
//                  directly; one cached primitive per instruction shape (bf16_matmul.h).
#include <dnnl.h>

#include <algorithm>
#include <omp.h>

#include "kiln/backend/cpu/gemm/bf16_matmul.h"
#include "kiln/backend/cpu/kernels/bf16_convert.h"
#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/backend/cpu/kernels/strided_copy.h"
#include "kiln/base/check.h"

namespace kiln::backend::cpu {

namespace {

using ir::Instr;

// How one operand enters the GEMM.
struct OperandPlan {
  bool transposed = false;       // stored per batch as [cols, rows] instead of [rows, cols]
  bool needs_copy = false;       // permute into [batch, rows, cols] first
  std::vector<int64_t> copy_dims, copy_strides;  // the permuting strided copy
  int64_t rows = 1, cols = 1;
};

bool is_identity(const std::vector<int64_t>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Plans operand `dims` as [batch..., outer..., inner...] where outer are the GEMM rows.
OperandPlan plan_operand(const std::vector<int64_t>& dims, const std::vector<int64_t>& batch,
                         const std::vector<int64_t>& outer, const std::vector<int64_t>& inner) {
  OperandPlan p;
  for (int64_t d : outer) p.rows *= dims[d];
  for (int64_t d : inner) p.cols *= dims[d];
  std::vector<int64_t> straight = batch, swapped = batch;
  straight.insert(straight.end(), outer.begin(), outer.end());
  straight.insert(straight.end(), inner.begin(), inner.end());
  swapped.insert(swapped.end(), inner.begin(), inner.end());
  swapped.insert(swapped.end(), outer.begin(), outer.end());
  if (is_identity(straight)) return p;
  if (is_identity(swapped)) {
    p.transposed = true;
    return p;
  }
  p.needs_copy = true;
  std::vector<int64_t> row = ir::row_major_strides(dims);
  for (int64_t d : straight) {
    p.copy_dims.push_back(dims[d]);
    p.copy_strides.push_back(row[d]);
  }
  return p;
}

std::vector<int64_t> free_dims(int rank, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end()) {
      out.push_back(d);
    }
  }
  return out;
}

// bf16 x bf16 -> f32 or bf16 on the matmul primitive: transposes and batch strides go into
// its memory descriptors; only an operand whose layout is neither [batch, rows, cols] nor
// its per-batch transpose is copied (in bf16) first.
Kernel bf16_dot_kernel(const Instr& instr, const OperandPlan& lhs, const OperandPlan& rhs, int64_t batch, int64_t M,
                       int64_t K, int64_t N) {
  Bf16MatmulDesc d;
  d.batch = batch, d.m = M, d.n = N, d.k = K;
  d.trans_a = lhs.transposed, d.trans_b = rhs.transposed;
  d.lda = lhs.transposed ? M : K, d.ldb = rhs.transposed ? K : N, d.ldc = N;
  d.batch_stride_a = M * K, d.batch_stride_b = K * N, d.batch_stride_c = M * N;
  d.f32_out = instr.shape().dtype() == ir::DType::kF32;
  return [=](std::span<const Value* const> in, Value& out) {
    const uint16_t* A = (*in[0])[0].as<uint16_t>();
    const uint16_t* B = (*in[1])[0].as<uint16_t>();
    Buffer a_copy, b_copy;
    if (lhs.needs_copy) {
      a_copy = Buffer(ir::Shape(ir::DType::kBF16, lhs.copy_dims));
      strided_copy(a_copy.data(), A, 2, lhs.copy_dims, lhs.copy_strides, 0);
      A = a_copy.as<uint16_t>();
    }
    if (rhs.needs_copy) {
      b_copy = Buffer(ir::Shape(ir::DType::kBF16, rhs.copy_dims));
      strided_copy(b_copy.data(), B, 2, rhs.copy_dims, rhs.copy_strides, 0);
      B = b_copy.as<uint16_t>();
    }
    if (M > 0 && N > 0 && batch > 0) bf16_matmul(d, A, B, out[0].data());
  };
}

// The operands of a dot as the kernels see them: [batch, M, K] x [batch, K, N].
struct DotPlan {
  OperandPlan lhs, rhs;
  int64_t batch = 1;
};

DotPlan plan_dot(const Instr& instr) {
  const auto& a = instr.attrs();
  const auto& lhs_dims = instr.operand(0)->shape().dims();
  const auto& rhs_dims = instr.operand(1)->shape().dims();
  auto lb = a.get_ints("lhs_batch"), rb = a.get_ints("rhs_batch");
  auto lc = a.get_ints("lhs_contract"), rc = a.get_ints("rhs_contract");
  DotPlan p;
  p.lhs = plan_operand(lhs_dims, lb, free_dims(static_cast<int>(lhs_dims.size()), lb, lc), lc);
  p.rhs = plan_operand(rhs_dims, rb, rc, free_dims(static_cast<int>(rhs_dims.size()), rb, rc));
  for (int64_t d : lb) p.batch *= lhs_dims[d];
  return p;
}

// What dot_kernel allocates besides its planned result. bf16 operands: the matmul primitive
// reads them as they are, so only a permuting copy (in bf16). Otherwise (f32): an operand
// widened from bf16, a permuting copy (in f32), and an f32 result narrowed to bf16 after.
// (oneDNN's own packing buffers are not counted: memory/memory_plan.h.)
int64_t dot_scratch_bytes(const Instr& instr) {
  const DotPlan p = plan_dot(instr);
  const bool bf16_path = instr.operand(0)->shape().dtype() == ir::DType::kBF16;
  int64_t bytes = 0;
  for (int k = 0; k < 2; ++k) {
    const ir::Shape& s = instr.operand(k)->shape();
    const OperandPlan& plan = k == 0 ? p.lhs : p.rhs;
    if (!bf16_path && s.dtype() == ir::DType::kBF16) bytes += 4 * s.num_elements();
    if (plan.needs_copy) bytes += (bf16_path ? 2 : 4) * s.num_elements();
  }
  if (!bf16_path && instr.shape().dtype() == ir::DType::kBF16) bytes += 4 * instr.shape().num_elements();
  return bytes;
}

Kernel dot_kernel(const Instr& instr) {
  const DotPlan plan = plan_dot(instr);
  const OperandPlan lhs = plan.lhs, rhs = plan.rhs;  // [batch, M, K], [batch, K, N]
  const int64_t batch = plan.batch;
  const int64_t M = lhs.rows, K = lhs.cols, N = rhs.cols;
  if (instr.operand(0)->shape().dtype() == ir::DType::kBF16) return bf16_dot_kernel(instr, lhs, rhs, batch, M, K, N);
  return [=](std::span<const Value* const> in, Value& out) {
    Buffer a_wide = widen_to_f32((*in[0])[0]), b_wide = widen_to_f32((*in[1])[0]);
    const float* A = a_wide.as<float>();
    const float* B = b_wide.as<float>();
    Buffer a_copy, b_copy;
    if (lhs.needs_copy) {
      a_copy = Buffer(ir::Shape(ir::DType::kF32, lhs.copy_dims));
      strided_copy(a_copy.data(), A, 4, lhs.copy_dims, lhs.copy_strides, 0);
      A = a_copy.as<float>();
    }
    if (rhs.needs_copy) {
      b_copy = Buffer(ir::Shape(ir::DType::kF32, rhs.copy_dims));
      strided_copy(b_copy.data(), B, 4, rhs.copy_dims, rhs.copy_strides, 0);
      B = b_copy.as<float>();
    }
    bool narrow_out = out[0].shape().dtype() == ir::DType::kBF16;
    Buffer c_wide = narrow_out ? Buffer(out[0].shape().with_dtype(ir::DType::kF32)) : out[0];
    float* C = c_wide.as<float>();
    const char ta = lhs.transposed ? 'T' : 'N', tb = rhs.transposed ? 'T' : 'N';
    const int64_t lda = lhs.transposed ? M : K, ldb = rhs.transposed ? K : N;
    auto one = [&](int64_t i) {
      dnnl_status_t s = dnnl_sgemm(ta, tb, M, N, K, 1.0f, A + i * M * K, lda, B + i * K * N, ldb, 0.0f, C + i * M * N, N);
      KILN_CHECK(s == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(s);
    };
    if (K == 0) {
      std::fill(C, C + batch * M * N, 0.0f);
    } else if (M > 0 && N > 0) {
      // Many small products (attention heads): one per thread; large ones: oneDNN threads.
      if (batch > 1 && M * N * K < (1 << 21)) {
#pragma omp parallel for schedule(dynamic)
        for (int64_t i = 0; i < batch; ++i) one(i);
      } else {
        for (int64_t i = 0; i < batch; ++i) one(i);
      }
    }
    if (narrow_out) narrow_to_bf16(c_wide, out[0]);
  };
}

bool f32_or_bf16(ir::DType d) { return d == ir::DType::kF32 || d == ir::DType::kBF16; }

bool gemm_dtypes(const Instr& instr) {
  return f32_or_bf16(instr.shape().dtype()) && f32_or_bf16(instr.operand(0)->shape().dtype()) &&
         f32_or_bf16(instr.operand(1)->shape().dtype());
}

}  // namespace

std::vector<NativeKernelEntry> gemm_kernels() {
  return {{ir::Opcode::kDotGeneral, gemm_dtypes, dot_kernel, dot_scratch_bytes}};
}

}  // namespace kiln::backend::cpu
