// The rng op on the CPU: the same counter-based values as its reference evaluation
// (ops/rng.h), written straight into the result's dtype on all of the device's threads.
// The initial parameters are made by this kernel, one block per device (a split rng), so
// start-up costs one pass over each device's own shard.
#include <cmath>

#include "kiln/backend/cpu/kernel.h"
#include "kiln/ops/rng.h"

namespace kiln::backend::cpu {
namespace {

using ir::DType;

// Below 1 after rounding to a narrow dtype, as the reference evaluation keeps it.
double clamp_uniform(double v) { return v >= 1.0 ? static_cast<double>(std::nextafter(1.0f, 0.0f)) : v; }

template <typename Store>
void fill(const ir::Instr& instr, Store store) {
  const ops::RngDistribution dist = ops::rng_distribution(instr);
  const int64_t seed = instr.attrs().get_int("seed");
  const ops::RngBlock block = ops::rng_block(instr);  // on the device's thread: its context
  const std::vector<int64_t>& dims = instr.shape().dims();
  const int64_t n = instr.shape().num_elements();
  const bool uniform = dist == ops::RngDistribution::kUniform;
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic)
  for (int64_t c = 0; c < chunks; ++c) {
    ops::for_each_global_index(block, dims, c * kChunk, std::min(n, (c + 1) * kChunk), [&](int64_t local, int64_t global) {
      const double v = ops::rng_value(dist, seed, global);
      store(local, uniform ? clamp_uniform(v) : v);
    });
  }
}

Kernel rng_kernel(const ir::Instr& instr) {
  return [&instr](std::span<const Value* const>, Value& out) {
    Buffer& b = out[0];
    switch (instr.shape().dtype()) {
      case DType::kF32: {
        float* y = b.as<float>();
        fill(instr, [y](int64_t i, double v) { y[i] = static_cast<float>(v); });
        return;
      }
      case DType::kBF16: {
        // Through f32, as ir::round_to_dtype rounds a double to bf16.
        uint16_t* y = b.as<uint16_t>();
        fill(instr, [y](int64_t i, double v) { y[i] = ir::float_to_bf16_bits(static_cast<float>(v)); });
        return;
      }
      case DType::kF64: {
        double* y = b.as<double>();
        fill(instr, [y](int64_t i, double v) { y[i] = v; });
        return;
      }
      default:
        break;
    }
    fill(instr, [&b](int64_t i, double v) { b.set(i, v); });
  };
}

}  // namespace

std::vector<NativeKernelEntry> rng_kernels() {
  return {{ir::Opcode::kRng, [](const ir::Instr&) { return true; }, rng_kernel}};
}

}  // namespace kiln::backend::cpu
