// Flash attention on bf16 dot products (AVX512-BF16 `vdpbf16ps`: pairs of bf16 products
// summed into f32 accumulators), for bf16 q, k, v with head dim 64. The f32 kernels
// (attention_kernels.cc) stay the path for every other case and for CPUs without the
// instructions; the softmax statistics, p and ds are computed in f32 in both, and p and ds
// are rounded to bf16 before their products here (as FlashAttention-2 does on GPUs).
#pragma once

#include <span>
#include <vector>

#include "kiln/backend/cpu/attention/attention_common.h"
#include "kiln/backend/cpu/kernels/kernel.h"

namespace kiln::backend::cpu {

// Whether the bf16 kernels take this instruction: q, k, v (and dout) bf16, Dh == 64, the
// build has AVX512-BF16 code and the CPU runs it, and KILN_ATTENTION_BF16_DOTS is not "0"
// (the switch that measures the f32 path on the same inputs).
bool attention_bf16_dots_apply(const attention_detail::Geometry& g, std::span<const Value* const> in, bool grad);

// The same contract as the f32 forward and backward (attention_kernels.cc): out, lse;
// dq, dk, dv and the per-(batch, head) partial sink gradients.
void attention_forward_bf16(const attention_detail::Geometry& g, std::span<const Value* const> in, Buffer& out,
                            Buffer& lse);
void attention_backward_bf16(const attention_detail::Geometry& g, std::span<const Value* const> in, Buffer& dq,
                             Buffer& dk, Buffer& dv, std::vector<float>& dsink_partial);

}  // namespace kiln::backend::cpu
