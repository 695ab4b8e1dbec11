#include "kiln/ops/rng.h"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"
#include "kiln/base/hash.h"
#include "kiln/base/strings.h"
#include "kiln/ops/device_context.h"

namespace kiln::ops {
namespace {

// Uniform in [0, 1) with 53 random bits.
double uniform_at(int64_t seed, int64_t counter, int64_t draw) {
  uint64_t bits = mix64(hash_combine(mix64(static_cast<uint64_t>(seed)), static_cast<uint64_t>(counter) * 4 + draw));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

double normal_at(int64_t seed, int64_t counter, int64_t attempt) {
  // Box-Muller on two independent uniforms; 1 - u keeps the log argument in (0, 1].
  double u1 = 1.0 - uniform_at(seed, counter * 64 + attempt, 0);
  double u2 = uniform_at(seed, counter * 64 + attempt, 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

RngDistribution rng_distribution(const ir::Instr& rng) {
  const std::string& dist = rng.attrs().get_string("distribution");
  if (dist == "uniform") return RngDistribution::kUniform;
  if (dist == "normal") return RngDistribution::kNormal;
  return RngDistribution::kTruncatedNormal;
}

double rng_value(RngDistribution dist, int64_t seed, int64_t counter) {
  switch (dist) {
    case RngDistribution::kUniform:
      return uniform_at(seed, counter, 0);
    case RngDistribution::kNormal:
      return normal_at(seed, counter, 0);
    case RngDistribution::kTruncatedNormal:
      break;
  }
  // Truncated to [-2, 2] by resampling (as jax.random.truncated_normal's support).
  double v = 0;
  for (int attempt = 0; attempt < 64; ++attempt) {
    v = normal_at(seed, counter, attempt);
    if (std::fabs(v) <= 2.0) return v;
  }
  return 0.0;
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
