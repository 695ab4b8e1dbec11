// AdamW as IR, exactly optax.adamw as MaxText configures it (optimizers.get_optimizer):
//
//   chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype),
//         add_decayed_weights(weight_decay, mask),
//         scale_by_learning_rate(schedule))
//
// per parameter p with gradient g, at optax count c (updates applied so far; the step
// counter input of the step program):
//   mu' = (1 - b1) g + b1 mu                     nu' = (1 - b2) g^2 + b2 nu
//   mu_hat = mu' / (1 - b1^(c+1))                nu_hat = nu' / (1 - b2^(c+1))
//   u = mu_hat / (sqrt(nu_hat + eps_root) + eps) + weight_decay * p   (decay unless masked)
//   p' = p + (-lr(c)) * u
// Moments and the update are computed in float32; mu is stored in mu_dtype, nu and p in
// the parameter's dtype. Weight decay is decoupled and scaled by the learning rate.
//
// adamw_mask (MaxText): regular expressions; a parameter whose path any of them matches
// (searched anywhere in it, like Python's re.search) gets no weight decay. Kiln's names are
// dotted ("layers.3.mlp.wi_0"); a pattern is tried against that name and against the same
// name with "/" separators, so MaxText-style patterns ("bias", ".*norm", "layers/.*scale")
// work unchanged.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/frontend/tensor.h"

namespace kiln::optim {

struct AdamWOptions {
  double b1 = 0.9;
  double b2 = 0.95;
  double eps = 1e-8;
  double eps_root = 0.0;
  double weight_decay = 0.1;
  std::vector<std::string> mask;  // adamw_mask patterns: matching parameters are not decayed
  frontend::DType mu_dtype = frontend::DType::kF32;

  // Reads adam_b1, adam_b2, adam_eps, adam_eps_root, adam_weight_decay, adamw_mask and
  // derived mu_dtype; checks that opt_type is adamw.
  static Result<AdamWOptions> from_config(const config::Config& config);
};

// For each name: true when it is decayed (no adamw_mask pattern matches it). A pattern that
// is not a valid regular expression is bad input naming adamw_mask.
Result<std::vector<bool>> weight_decay_mask(std::span<const std::string> names,
                                            std::span<const std::string> patterns);

struct AdamWResult {
  std::vector<frontend::Tensor> params;  // p'
  std::vector<frontend::Tensor> mu;      // mu' in mu_dtype
  std::vector<frontend::Tensor> nu;      // nu' in the parameter's dtype
};

// One AdamW update. `step` is the s32 scalar count c, `learning_rate` the f32 scalar lr(c),
// `decay[i]` whether parameter i is decayed. All spans have one entry per parameter.
AdamWResult adamw_update(const AdamWOptions& options, std::span<const frontend::Tensor> params,
                         std::span<const frontend::Tensor> grads, std::span<const frontend::Tensor> mu,
                         std::span<const frontend::Tensor> nu, const frontend::Tensor& step,
                         const frontend::Tensor& learning_rate, const std::vector<bool>& decay);

}  // namespace kiln::optim
