// DeepSeek's multi-head latent attention (mla.cc). Internal to models/deepseek.
#pragma once

#include <string>

#include "kiln/frontend/tensor.h"
#include "kiln/models/deepseek/deepseek.h"
#include "kiln/models/gpt_oss/layers.h"

namespace kiln::models::deepseek {

// x: [B, T, D] (already normalised) -> [B, T, D]. `prefix` is "layers.N.self_attention".
// `rope` covers qk_rope_head_dim; `allowed` is the mask the dot-product path reads, the
// flash path builds the same (causal, segments) from `segmentation` [B, T].
frontend::Tensor mla_attention(const DeepseekConfig& c, const gpt_oss::ParamTable& p, const std::string& prefix,
                               const frontend::Tensor& x, const gpt_oss::RopeTables& rope,
                               const frontend::Tensor& allowed, const frontend::Tensor& segmentation);

}  // namespace kiln::models::deepseek
