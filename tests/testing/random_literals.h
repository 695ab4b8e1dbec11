// Seeded random inputs for tests: never all zeros or ones, reproducible run after run.
#pragma once

#include <random>
#include <utility>
#include <vector>

#include "kiln/ir/literal.h"

namespace kiln::testing {

// Floats uniform in [low, high); integers uniform in [low, high); pred fair coin flips.
inline ir::Literal random_literal(const ir::Shape& shape, std::mt19937_64& rng, double low, double high) {
  std::vector<double> values(shape.num_elements());
  ir::DType dtype = shape.dtype();
  for (double& v : values) {
    if (dtype == ir::DType::kPred) {
      v = static_cast<double>(rng() & 1);
    } else if (ir::is_integral(dtype)) {
      int64_t lo = static_cast<int64_t>(low), hi = static_cast<int64_t>(high);
      v = static_cast<double>(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(1, hi - lo))));
    } else {
      v = std::uniform_real_distribution<double>(low, high)(rng);
    }
  }
  return ir::Literal(shape, std::move(values));
}

}  // namespace kiln::testing
