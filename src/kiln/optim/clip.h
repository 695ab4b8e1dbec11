// Global-norm gradient clipping as IR, with optax.clip_by_global_norm's semantics (which
// MaxText applies when gradient_clipping_threshold > 0):
//   norm = sqrt(sum over all tensors of sum(g^2))
//   g' = g                      if norm < threshold
//        (g / norm) * threshold otherwise
#pragma once

#include <span>
#include <vector>

#include "kiln/frontend/tensor.h"

namespace kiln::optim {

// sqrt of the sum of squares of every element of every tensor, an f32 scalar (each tensor
// is squared and summed in float32, whatever its dtype).
frontend::Tensor global_norm(std::span<const frontend::Tensor> tensors);

struct Clipped {
  std::vector<frontend::Tensor> grads;  // clipped (or the inputs when threshold <= 0)
  frontend::Tensor raw_norm;            // global norm before clipping
  frontend::Tensor norm;                // global norm after clipping: raw_norm, or the threshold when clipped
};

// threshold <= 0 turns clipping off (MaxText's 0 = off); the norms are computed either way.
Clipped clip_by_global_norm(std::span<const frontend::Tensor> grads, double threshold);

}  // namespace kiln::optim
