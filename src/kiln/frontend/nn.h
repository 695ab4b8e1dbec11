// Composite layers built from primitives, as model code uses them. Shapes in comments use
// B batch, T sequence, D model width, V vocabulary.
#pragma once

#include "kiln/frontend/tensor.h"

namespace kiln::frontend::nn {

// Numerically stable along `axis` (the max is shifted out without a gradient).
Tensor softmax(const Tensor& x, int axis);
Tensor log_softmax(const Tensor& x, int axis);
Tensor logsumexp(const Tensor& x, int axis, bool keepdims = false);

// x: [..., D], scale: [D]. Computed in float32 whatever x's dtype, result in x's dtype:
// x * rsqrt(mean(x^2) + eps) * scale.
Tensor rms_norm(const Tensor& x, const Tensor& scale, double eps);

// x: [..., D_in] @ w: [D_in, D_out] (+ b: [D_out]).
Tensor linear(const Tensor& x, const Tensor& w);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// SwiGLU as in Llama: silu(gate) * up.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// GPT-OSS's clamped variant: gate clamped above at `limit`, up clamped to [-limit, limit],
// gate * sigmoid(alpha * gate) * (up + 1).
Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, double alpha, double limit);

// Token cross-entropy. logits [..., V] (any float dtype, computed in float32),
// targets [...] s32, weights [...] float32 (1 for tokens that count, 0 for padding).
// Returns the weighted sum of -log p(target) as a float32 scalar.
Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, const Tensor& weights);

}  // namespace kiln::frontend::nn
