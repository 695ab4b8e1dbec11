// Rotary position embeddings: the inverse frequencies (plain RoPE, Llama 3.1's scaling or
// YaRN, spec §1.4), computed once on the host in double, and their application to q and k.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/models/gpt_oss/layers.h"

namespace kiln::models::gpt_oss {

using frontend::Tensor;

std::vector<double> rope_inv_freq(const RopeConfig& r) {
  const int64_t d = r.head_dim, half = d / 2;
  std::vector<double> inv(half);
  if (r.type != "yarn") {
    // MaxText RotaryEmbedding: timescale_i = min * (max / min)^(2i / d).
    for (int64_t i = 0; i < half; ++i) {
      double fraction = 2.0 * static_cast<double>(i) / static_cast<double>(d);
      inv[i] = 1.0 / (r.min_timescale * std::pow(r.max_timescale / r.min_timescale, fraction));
    }
    if (r.type == "llama3.1") {
      // Llama 3.1 (transformers' rope_type "llama3", MaxText's llama3.1): frequencies whose
      // wavelength is shorter than original / high_freq_factor are kept, those longer than
      // original / low_freq_factor are divided by the factor, and those in between are
      // blended by how many times they turn over the original context. The low and high
      // factors are fixed at 1 and 4 (Meta's values; MaxText has no key for them).
      constexpr double kLowFreqFactor = 1.0, kHighFreqFactor = 4.0;
      const double original = static_cast<double>(r.original_max_position);
      const double low_freq_wavelen = original / kLowFreqFactor, high_freq_wavelen = original / kHighFreqFactor;
      for (double& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_freq_wavelen) {
          f /= r.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth = (original / wavelen - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
          f = (1.0 - smooth) * f / r.factor + smooth * f;
        }
      }
    }
    return inv;
  }
  // YaRN: blend the original frequency (extrapolation) and the frequency divided by the
  // factor (interpolation) with a linear ramp over the "correction range" of dimensions,
  // the dimensions whose wavelength turns between beta_fast and beta_slow times over the
  // original context.
  const double theta = r.max_timescale;
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(d) *
           std::log(static_cast<double>(r.original_max_position) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int64_t i = 0; i < half; ++i) {
    double extrapolation = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    double interpolation = extrapolation / r.factor;
    double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    inv[i] = ramp * interpolation + (1.0 - ramp) * extrapolation;
  }
  return inv;
}

double rope_cos_sin_scale(const RopeConfig& r) {
  if (r.type != "yarn" || !r.attention_scaling || r.factor <= 1.0) return 1.0;
  return 0.1 * r.mscale * std::log(r.factor) + 1.0;
}

RopeTables rope_tables(const RopeConfig& rope, const Tensor& positions, const std::vector<double>& inv_freq) {
  frontend::Graph& g = *positions.graph();
  const int64_t b = positions.dim(0), t = positions.dim(1), half = static_cast<int64_t>(inv_freq.size());
  Tensor freq = g.constant(ir::Literal(frontend::f32({half}), inv_freq));                 // [Dh/2]
  Tensor angles = positions.astype(ir::DType::kF32).reshape({b, t, 1, 1}) * freq;         // [B, T, 1, Dh/2]
  RopeTables tables{cos(angles), sin(angles), rope.type == "yarn" && rope.interleave};
  const double scale = rope_cos_sin_scale(rope);
  if (scale != 1.0) {
    tables.cos = tables.cos * scale;
    tables.sin = tables.sin * scale;
  }
  tables.cos = tables.cos.named("rope_cos");
  tables.sin = tables.sin.named("rope_sin");
  return tables;
}

Tensor apply_rope(const Tensor& x, const RopeTables& rope) {
  const int64_t dh = x.dim(3), half = dh / 2;
  KILN_CHECK_EQ(rope.cos.dim(3), half);
  Tensor xf = x.astype(ir::DType::kF32);
  Tensor first = rope.interleave ? xf.slice(-1, 0, dh, 2) : xf.slice(-1, 0, half);      // [B, T, N, Dh/2]
  Tensor second = rope.interleave ? xf.slice(-1, 1, dh, 2) : xf.slice(-1, half, dh);
  Tensor rotated = frontend::concatenate(
      {first * rope.cos - second * rope.sin, second * rope.cos + first * rope.sin}, -1);
  return rotated.astype(x.dtype());
}

}  // namespace kiln::models::gpt_oss
