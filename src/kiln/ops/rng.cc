#include "kiln/ops/rng.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"
#include "kiln/base/strings.h"
#include "kiln/ops/device_context.h"

namespace kiln::ops {
namespace {

// Draws per element of a normal: attempt 0, then redraws of a truncated normal.
constexpr uint64_t kAttempts = 64;

// SplitMix64's output function at `counter` of the stream (a Weyl sequence): 64 bits.
inline uint64_t bits_at(uint64_t stream, uint64_t counter) {
  uint64_t x = stream + counter * 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the top 24 bits: exact in f32.
inline float uniform_from(uint64_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 40)) * 0x1.0p-24f;
}

// ln(x) for x in [2^-24, 1): x = m 2^e with m in [sqrt(1/2), sqrt(2)), and
// ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^9
// (truncation below 1e-9 of the result).
inline float log_unit(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  int32_t e = static_cast<int32_t>(b >> 23) - 127;
  float m = std::bit_cast<float>((b & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  const float tail = s2 * (2.0f / 3.0f + s2 * (2.0f / 5.0f + s2 * (2.0f / 7.0f + s2 * (2.0f / 9.0f))));
  return static_cast<float>(e) * 0.693147180559945f + (2.0f * s + s * tail);
}

// cos(2 pi t) for t in [0, 1): t = q/4 + r with |r| <= 1/8, then the sine or cosine of
// x = 2 pi r (|x| <= pi/4) by Taylor polynomials (truncation below 2e-9).
inline float cos_turns(float t) {
  const int32_t q = static_cast<int32_t>(4.0f * t + 0.5f);
  const float x = (t - static_cast<float>(q) * 0.25f) * 6.28318530717958648f;
  const float x2 = x * x;
  const float sin_x =
      x * (1.0f + x2 * (-1.0f / 6.0f + x2 * (1.0f / 120.0f + x2 * (-1.0f / 5040.0f + x2 * (1.0f / 362880.0f)))));
  const float cos_x =
      1.0f + x2 * (-0.5f + x2 * (1.0f / 24.0f + x2 * (-1.0f / 720.0f + x2 * (1.0f / 40320.0f + x2 * (-1.0f / 3628800.0f)))));
  const int32_t quadrant = q & 3;  // cos(x + quadrant pi/2)
  return quadrant == 0 ? cos_x : quadrant == 1 ? -sin_x : quadrant == 2 ? -cos_x : sin_x;
}

// Box-Muller: radius from 23 bits (u1 = (2k + 1) 2^-24, in (0, 1) and exact in f32), angle
// from 24 others.
inline float normal_from(uint64_t bits) {
  const float u1 = static_cast<float>(static_cast<int32_t>((bits >> 41) * 2 + 1)) * 0x1.0p-24f;
  const float t = static_cast<float>(static_cast<int32_t>(bits & 0xffffffu)) * 0x1.0p-24f;
  return std::sqrt(std::max(0.0f, -2.0f * log_unit(u1))) * cos_turns(t);
}

// A truncated normal's redraws for out[0, count), elements [start, start + count): each
// element outside [-2, 2] (4.6% of them after each draw) draws again at its next attempt, as
// jax.random.truncated_normal's support, vectorised over the list of those still outside.
// 63 redraws all outside: p < 1e-84, and the element is 0.
void truncated_redraws(uint64_t stream, uint64_t start, int64_t count, float* out) {
  constexpr int64_t kBlock = 1024;
  int64_t outside[kBlock];
  alignas(64) float drawn[kBlock];
  for (int64_t first = 0; first < count; first += kBlock) {
    const int64_t n = std::min(kBlock, count - first);
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!(std::fabs(out[first + i]) <= 2.0f)) outside[m++] = first + i;
    }
    for (uint64_t attempt = 1; attempt < kAttempts && m > 0; ++attempt) {
      for (int64_t j = 0; j < m; ++j) {
        drawn[j] = normal_from(bits_at(stream, (start + static_cast<uint64_t>(outside[j])) * kAttempts + attempt));
      }
      int64_t still = 0;
      for (int64_t j = 0; j < m; ++j) {
        if (std::fabs(drawn[j]) <= 2.0f) {
          out[outside[j]] = drawn[j];
        } else {
          outside[still++] = outside[j];
        }
      }
      m = still;
    }
    for (int64_t j = 0; j < m; ++j) out[outside[j]] = 0.0f;
  }
}

}  // namespace

RngDistribution rng_distribution(const ir::Instr& rng) {
  const std::string& dist = rng.attrs().get_string("distribution");
  if (dist == "uniform") return RngDistribution::kUniform;
  if (dist == "normal") return RngDistribution::kNormal;
  return RngDistribution::kTruncatedNormal;
}

void rng_fill(RngDistribution dist, int64_t seed, int64_t first, int64_t count, float* out) {
  const uint64_t stream = mix64(static_cast<uint64_t>(seed));
  const uint64_t start = static_cast<uint64_t>(first);
  if (dist == RngDistribution::kUniform) {
    for (int64_t i = 0; i < count; ++i) out[i] = uniform_from(bits_at(stream, start + static_cast<uint64_t>(i)));
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    out[i] = normal_from(bits_at(stream, (start + static_cast<uint64_t>(i)) * kAttempts));
  }
  if (dist == RngDistribution::kTruncatedNormal) truncated_redraws(stream, start, count, out);
}

float rng_value(RngDistribution dist, int64_t seed, int64_t counter) {
  float v = 0;
  rng_fill(dist, seed, counter, 1, &v);
  return v;
}

double round_uniform(ir::DType dtype, double value) {
  const double v = ir::round_to_dtype(dtype, value);
  if (v < 1.0) return v;
  switch (dtype) {
    case ir::DType::kBF16:
      return 1.0 - 0x1.0p-8;
    case ir::DType::kF64:
      return std::nextafter(1.0, 0.0);
    default:
      return static_cast<double>(std::nextafter(1.0f, 0.0f));
  }
}

std::string format_split(const ir::Sharding& sharding) {
  std::vector<std::string> dims;
  for (const auto& axes : sharding.dims) dims.push_back(fmt::format("{}", fmt::join(axes, ",")));
  return fmt::format("{}", fmt::join(dims, ";"));
}

ir::Sharding parse_split(const std::string& text, int rank) {
  ir::Sharding s;
  for (const std::string& dim : split(text, ';')) {
    std::vector<std::string> axes;
    for (const std::string& a : split(dim, ',')) {
      if (!a.empty()) axes.push_back(a);
    }
    s.dims.push_back(std::move(axes));
  }
  KILN_CHECK(static_cast<int>(s.dims.size()) == rank) << "rng split '" << text << "' for a rank-" << rank << " result";
  return s;
}

RngBlock rng_block(const ir::Instr& rng) {
  const std::vector<int64_t>& local = rng.shape().dims();
  RngBlock block{local, std::vector<int64_t>(local.size(), 0)};
  if (!rng.attrs().has("split")) return block;
  const ir::Sharding split = parse_split(rng.attrs().get_string("split"), rng.shape().rank());
  const DeviceContext& device = current_device();
  for (size_t d = 0; d < local.size(); ++d) {
    const int64_t n = device.mesh.size(split.dims[d]);
    block.global_dims[d] = local[d] * n;
    block.offset[d] = device.mesh.shard_index(device.device, split.dims[d]) * local[d];
  }
  return block;
}

}  // namespace kiln::ops
