// Native s32 reductions and scatter_add: the MoE's counts per expert (a one-hot summed over
// the pairs, or ones scattered into [E] by expert) are s32, and the float kernels
// (reduction_kernels.cc, data_movement_kernels.cc) take floats only.
//
//   reduce_{sum,max,min}: x [..] -> the kept dims, any set of reduced dims
//   scatter_add:          x [batch, pre, n, post] += updates [batch, pre, m, post] at idx [batch, m]
//
// Sums wrap modulo 2^32 (unsigned arithmetic), as two's-complement s32 addition does;
// integer sums are exact, so any order gives the same result and the loops are plain.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/backend/cpu/kernels/kernel.h"

namespace kiln::backend::cpu {

namespace {

using ir::DType;
using ir::Instr;
using ir::Opcode;

bool s32_input(const Instr& instr) { return instr.operand(0)->shape().dtype() == DType::kS32; }

// Each input element's output position: the row-major index over the kept dims.
struct ReduceMap {
  std::vector<int64_t> out_stride;  // per input dim: stride in the output (0 for a reduced dim)
  std::vector<int64_t> in_dims;
};

ReduceMap reduce_map(const Instr& instr) {
  ReduceMap m;
  m.in_dims = instr.operand(0)->shape().dims();
  std::vector<int64_t> reduced = instr.attrs().get_ints("dims");
  m.out_stride.assign(m.in_dims.size(), 0);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(m.in_dims.size()) - 1; d >= 0; --d) {
    if (std::find(reduced.begin(), reduced.end(), d) != reduced.end()) continue;
    m.out_stride[d] = stride;
    stride *= m.in_dims[d];
  }
  return m;
}

Kernel s32_reduce_kernel(const Instr& instr) {
  const ReduceMap m = reduce_map(instr);
  const Opcode op = instr.opcode();
  const int64_t out_n = instr.shape().num_elements();
  return [m, op, out_n](std::span<const Value* const> in, Value& out) {
    const int32_t* x = (*in[0])[0].as<int32_t>();
    int32_t* y = out[0].as<int32_t>();
    const int32_t init = op == Opcode::kReduceSum   ? 0
                         : op == Opcode::kReduceMax ? std::numeric_limits<int32_t>::min()
                                                    : std::numeric_limits<int32_t>::max();
    std::fill(y, y + out_n, init);
    // Walk the input in order with an odometer over its dims, carrying the output offset.
    const int rank = static_cast<int>(m.in_dims.size());
    std::vector<int64_t> idx(rank, 0);
    int64_t total = 1;
    for (int64_t d : m.in_dims) total *= d;
    int64_t o = 0;
    for (int64_t i = 0; i < total; ++i) {
      const int32_t v = x[i];
      if (op == Opcode::kReduceSum) {
        y[o] = static_cast<int32_t>(static_cast<uint32_t>(y[o]) + static_cast<uint32_t>(v));
      } else if (op == Opcode::kReduceMax) {
        y[o] = std::max(y[o], v);
      } else {
        y[o] = std::min(y[o], v);
      }
      for (int d = rank - 1; d >= 0; --d) {
        o += m.out_stride[d];
        if (++idx[d] < m.in_dims[d]) break;
        o -= m.out_stride[d] * m.in_dims[d];
        idx[d] = 0;
      }
    }
  };
}

Kernel s32_scatter_add_kernel(const Instr& instr) {
  const auto& x = instr.operand(0)->shape().dims();
  const auto& idx = instr.operand(1)->shape().dims();
  const int64_t axis = instr.attrs().get_int("axis");
  const int64_t batch_dims = instr.attrs().get_int_or("batch_dims", 0);
  int64_t batch = 1, pre = 1, n = x[axis], post = 1, m = 1;
  for (int64_t d = 0; d < batch_dims; ++d) batch *= x[d];
  for (int64_t d = batch_dims; d < axis; ++d) pre *= x[d];
  for (size_t d = axis + 1; d < x.size(); ++d) post *= x[d];
  for (size_t d = batch_dims; d < idx.size(); ++d) m *= idx[d];
  const bool s32_index = instr.operand(1)->shape().dtype() == DType::kS32;
  return [=](std::span<const Value* const> in, Value& out) {
    std::memcpy(out[0].data(), (*in[0])[0].data(), static_cast<size_t>(out[0].byte_size()));
    const Buffer& ib = (*in[1])[0];
    const uint32_t* upd = (*in[2])[0].as<uint32_t>();
    uint32_t* y = out[0].as<uint32_t>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t p = 0; p < pre; ++p) {
        for (int64_t j = 0; j < m; ++j) {
          const int64_t k = s32_index ? ib.as<int32_t>()[b * m + j] : static_cast<int64_t>(ib.as<uint32_t>()[b * m + j]);
          if (k < 0 || k >= n) continue;  // out of range: dropped, as in the reference
          uint32_t* dst = y + ((b * pre + p) * n + k) * post;
          const uint32_t* src = upd + ((b * pre + p) * m + j) * post;
          for (int64_t q = 0; q < post; ++q) dst[q] += src[q];
        }
      }
    }
  };
}

}  // namespace

std::vector<NativeKernelEntry> integer_kernels() {
  return {
      {Opcode::kReduceSum, s32_input, s32_reduce_kernel},
      {Opcode::kReduceMax, s32_input, s32_reduce_kernel},
      {Opcode::kReduceMin, s32_input, s32_reduce_kernel},
      {Opcode::kScatterAdd, s32_input, s32_scatter_add_kernel},
  };
}

}  // namespace kiln::backend::cpu
