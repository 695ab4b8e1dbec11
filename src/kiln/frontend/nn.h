// Composite layers built from primitives, as model code uses them. Shapes in comments use
// B batch, T sequence, D model width, V vocabulary.
#pragma once

#include "kiln/frontend/tensor.h"

namespace kiln::frontend::nn {

// Numerically stable along `axis` (the max is shifted out without a gradient).
Tensor softmax(const Tensor& x, int axis);
Tensor log_softmax(const Tensor& x, int axis);
Tensor logsumexp(const Tensor& x, int axis, bool keepdims = false);

// x: [..., D], scale: [D]. Computed in at least float32 (bf16 is widened), result in x's dtype:
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

// Scaled dot-product attention with grouped-query heads and optional attention sinks.
//   q: [B, T, H, Dh]; k, v: [B, S, K, Dh] with H a multiple of K (query head h reads
//   key/value head h / (H / K), so heads 0..H/K-1 share kv head 0);
//   allowed: pred, broadcastable to [B, T, S] (true where query t may see key s; every row
//   needs at least one true entry, e.g. the diagonal of a causal mask);
//   sinks: [H] or an empty Tensor: one extra learned logit per head appended to every
//   softmax row, whose probability is then dropped (GPT-OSS), so a row's weights sum to < 1.
// logits = scale * q.k are formed in q's dtype and the softmax runs in float32 (float64 for
// float64 inputs); the result [B, T, H, Dh] is in q's dtype. Masked logits get a large
// finite negative value.
Tensor dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed,
                             double scale, const Tensor& sinks = Tensor());

// The same attention as one fused primitive (ops `attention`, flash kernels on the CPU):
// never materializes [T, S] scores, and its gradient is one fused backward op. The mask is
// given by its parts rather than as a tensor: causal (key j <= query i), window (> 0: the
// `window` keys up to and including i, GPT-OSS's sliding layers; needs causal) and segment
// ids (s32 q_segment [B, T], kv_segment [B, S], or empty Tensors: no attention across
// segments). Statistics in float32 (float64 for float64 inputs); result [B, T, H, Dh] in
// q's dtype.
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& sinks,
                       const Tensor& q_segment, const Tensor& kv_segment, bool causal, int64_t window);

// Token cross-entropy. logits [..., V] (any float dtype, computed in float32),
// targets [...] s32, weights [...] float32 (1 for tokens that count, 0 for padding).
// Returns the weighted sum of -log p(target) as a scalar (float32 for bf16 logits).
Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, const Tensor& weights);

}  // namespace kiln::frontend::nn
