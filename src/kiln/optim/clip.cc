#include "kiln/optim/clip.h"

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"

namespace kiln::optim {

using frontend::DType;
using frontend::Tensor;

Tensor global_norm(std::span<const Tensor> tensors) {
  KILN_CHECK(!tensors.empty()) << "global_norm of no tensors";
  frontend::Graph& g = *tensors[0].graph();
  Tensor total = g.scalar(0.0);
  for (const Tensor& t : tensors) total = total + square(t.astype(DType::kF32)).sum();
  return sqrt(total);
}

Clipped clip_by_global_norm(std::span<const Tensor> grads, double threshold) {
  KILN_CHECK(!grads.empty()) << "clip_by_global_norm of no gradients";
  frontend::Graph& g = *grads[0].graph();
  auto scope = g.scope("clip_by_global_norm");
  Clipped out;
  out.raw_norm = global_norm(grads).named("raw_grad_norm");
  if (threshold <= 0) {
    out.grads.assign(grads.begin(), grads.end());
    out.norm = out.raw_norm;
    return out;
  }
  Tensor keep = out.raw_norm < threshold;  // pred []
  for (const Tensor& t : grads) {
    Tensor norm = out.raw_norm.astype(t.dtype());
    out.grads.push_back(where(keep, t, (t / norm) * threshold));
  }
  out.norm = global_norm(out.grads).named("grad_norm");
  return out;
}

}  // namespace kiln::optim
