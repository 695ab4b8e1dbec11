#include "kiln/frontend/nn.h"

#include "kiln/frontend/graph.h"

namespace kiln::frontend::nn {

Tensor logsumexp(const Tensor& x, int axis, bool keepdims) {
  Tensor shift = stop_gradient(x.max({axis}, true));
  Tensor lse = log(exp(x - shift).sum({axis}, true)) + shift;
  return keepdims ? lse : lse.squeeze(axis);
}

Tensor softmax(const Tensor& x, int axis) {
  Tensor shift = stop_gradient(x.max({axis}, true));
  Tensor e = exp(x - shift);
  return e / e.sum({axis}, true);
}

Tensor log_softmax(const Tensor& x, int axis) { return x - logsumexp(x, axis, true); }

Tensor rms_norm(const Tensor& x, const Tensor& scale, double eps) {
  Tensor xf = x.astype(DType::kF32);
  Tensor inv_rms = rsqrt(square(xf).mean({-1}, true) + eps);
  return (xf * inv_rms * scale.astype(DType::kF32)).astype(x.dtype());
}

Tensor linear(const Tensor& x, const Tensor& w) { return matmul(x, w); }
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return matmul(x, w) + b; }

Tensor swiglu(const Tensor& gate, const Tensor& up) { return gate * sigmoid(gate) * up; }

Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, double alpha, double limit) {
  Tensor g = minimum(gate, limit);
  Tensor u = clip(up, -limit, limit);
  return g * sigmoid(g * alpha) * (u + 1.0);
}

Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, const Tensor& weights) {
  Tensor lf = logits.astype(DType::kF32);
  Tensor lse = logsumexp(lf, -1);                            // [...]
  int batch_dims = targets.rank();
  Tensor target_logit = lf.take(targets.expand_dims(-1), -1, batch_dims).squeeze(-1);  // [...]
  return ((lse - target_logit) * weights).sum();
}

}  // namespace kiln::frontend::nn
