// The rng op on the CPU: the same counter-based values as its reference evaluation
// (ops/rng.h, whose vectorised rng_fill both call), written into the result's dtype on all
// of the device's threads. The initial parameters are made by this kernel, one block per
// device (a split rng), so start-up costs one pass over each device's own shard.
#include <algorithm>

#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/ops/rng.h"

namespace kiln::backend::cpu {
namespace {

using ir::DType;

// Values are made in f32 runs of at most kRun, on the stack, then stored in the dtype.
constexpr int64_t kRun = 1024;

// store(local_begin, values, count) for every run of the device's block; chunks of rows
// across the threads.
template <typename Store>
void fill(const ir::Instr& instr, Store store) {
  const ops::RngDistribution dist = ops::rng_distribution(instr);
  const int64_t seed = instr.attrs().get_int("seed");
  const ops::RngBlock block = ops::rng_block(instr);  // on the device's thread: its context
  const std::vector<int64_t>& dims = instr.shape().dims();
  const int64_t n = instr.shape().num_elements();
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic)
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(64) float values[kRun];
    ops::for_each_global_run(block, dims, c * kChunk, std::min(n, (c + 1) * kChunk),
                             [&](int64_t local, int64_t global, int64_t count) {
                               for (int64_t done = 0; done < count; done += kRun) {
                                 const int64_t m = std::min(kRun, count - done);
                                 ops::rng_fill(dist, seed, global + done, m, values);
                                 store(local + done, values, m);
                               }
                             });
  }
}

Kernel rng_kernel(const ir::Instr& instr) {
  return [&instr](std::span<const Value* const>, Value& out) {
    Buffer& b = out[0];
    const DType dtype = instr.shape().dtype();
    // Uniform values stay below 1 after rounding (f32 holds the generator's values exactly).
    const bool round_uniform = ops::rng_distribution(instr) == ops::RngDistribution::kUniform && dtype != DType::kF32;
    if (dtype == DType::kF32) {
      float* y = b.as<float>();
      fill(instr, [y](int64_t at, const float* v, int64_t m) { std::copy(v, v + m, y + at); });
    } else if (dtype == DType::kBF16 && !round_uniform) {
      uint16_t* y = b.as<uint16_t>();
      fill(instr, [y](int64_t at, const float* v, int64_t m) {
        for (int64_t i = 0; i < m; ++i) y[at + i] = ir::float_to_bf16_bits(v[i]);
      });
    } else {
      fill(instr, [&b, dtype, round_uniform](int64_t at, const float* v, int64_t m) {
        for (int64_t i = 0; i < m; ++i) b.set(at + i, round_uniform ? ops::round_uniform(dtype, v[i]) : v[i]);
      });
    }
  };
}

}  // namespace

std::vector<NativeKernelEntry> rng_kernels() {
  return {{ir::Opcode::kRng, [](const ir::Instr&) { return true; }, rng_kernel}};
}

}  // namespace kiln::backend::cpu
