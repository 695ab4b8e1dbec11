#include "kiln/frontend/nn.h"

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"

namespace kiln::frontend::nn {

namespace {
// Statistics are computed in at least float32: bf16 is widened, f32 and f64 stay as they are.
DType stats_dtype(DType dtype) { return dtype == DType::kBF16 ? DType::kF32 : dtype; }
}  // namespace

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
  DType compute = stats_dtype(x.dtype());
  Tensor xf = x.astype(compute);
  Tensor inv_rms = rsqrt(square(xf).mean({-1}, true) + eps);
  return (xf * inv_rms * scale.astype(compute)).astype(x.dtype());
}

Tensor linear(const Tensor& x, const Tensor& w) { return matmul(x, w); }
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return matmul(x, w) + b; }

Tensor swiglu(const Tensor& gate, const Tensor& up) { return gate * sigmoid(gate) * up; }

Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, double alpha, double limit) {
  Tensor g = minimum(gate, limit);
  Tensor u = clip(up, -limit, limit);
  return g * sigmoid(g * alpha) * (u + 1.0);
}

Tensor dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed,
                             double scale, const Tensor& sinks) {
  KILN_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4) << "attention wants [B, T, heads, Dh] operands";
  const int64_t b = q.dim(0), t = q.dim(1), h = q.dim(2), dh = q.dim(3);
  const int64_t s = k.dim(1), kv = k.dim(2);
  KILN_CHECK(h % kv == 0) << h << " query heads over " << kv << " kv heads";
  const int64_t group = h / kv;
  // Query head h = kv_head * group + g.
  Tensor qg = q.reshape({b, t, kv, group, dh});                                          // [B, T, K, G, Dh]
  const DType stats = stats_dtype(q.dtype());
  Tensor logits = einsum("btkgd,bskd->bkgts", qg, k).astype(stats) * scale;              // [B, K, G, T, S]
  Tensor mask = allowed.broadcast_to({b, t, s}).reshape({b, 1, 1, t, s});
  // -0.7 * float32 max, as MaxText: exp() of it minus any row max is exactly 0.
  constexpr double kMaskValue = -0.7 * 3.4028234663852886e38;
  logits = where(mask, logits, kMaskValue);
  Tensor shift = stop_gradient(logits.max({-1}, true));                                 // [B, K, G, T, 1]
  Tensor sink;
  if (sinks.valid()) {
    KILN_CHECK(sinks.rank() == 1 && sinks.dim(0) == h) << "sinks must be [" << h << "]";
    sink = sinks.astype(stats).reshape({1, kv, group, 1, 1});
    shift = maximum(shift, stop_gradient(sink));
  }
  Tensor e = exp(logits - shift);
  Tensor denom = e.sum({-1}, true);
  if (sink.valid()) denom = denom + exp(sink - shift);
  Tensor probs = (e / denom).astype(q.dtype());                                         // [B, K, G, T, S]
  return einsum("bkgts,bskd->btkgd", probs, v).reshape({b, t, h, dh});
}

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& sinks,
                       const Tensor& q_segment, const Tensor& kv_segment, bool causal, int64_t window) {
  KILN_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4) << "attention wants [B, T, heads, Dh] operands";
  ops::Builder& b = q.graph()->builder();
  ir::Instr* t = b.attention(q.instr(), k.instr(), v.instr(), sinks.valid() ? sinks.instr() : nullptr,
                             q_segment.valid() ? q_segment.instr() : nullptr,
                             kv_segment.valid() ? kv_segment.instr() : nullptr, scale, causal, window);
  return Tensor(q.graph(), b.get_tuple_element(t, 0));
}

Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, const Tensor& weights) {
  Tensor lf = logits.astype(stats_dtype(logits.dtype()));
  Tensor lse = logsumexp(lf, -1);                            // [...]
  int batch_dims = targets.rank();
  Tensor target_logit = lf.take(targets.expand_dims(-1), -1, batch_dims).squeeze(-1);  // [...]
  return ((lse - target_logit) * weights).sum();
}

}  // namespace kiln::frontend::nn
