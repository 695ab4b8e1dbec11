// bf16 <-> f32 conversion of whole buffers, for kernels that compute bf16 operands through
// f32 library calls (GEMMs, grouped matmuls): widen the inputs, round the result.
#pragma once

#include <bit>
#include <cstdint>

#include "kiln/backend/buffer.h"
#include "kiln/backend/cpu/kernels/kernel.h"

namespace kiln::backend::cpu {

// ir::bf16_bits_to_float and ir::float_to_bf16_bits (the same bits: round to nearest even,
// NaN kept quiet), inline so that loops over whole buffers vectorize instead of calling
// out of line per element.
inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (value != value) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// An f32 view of `b`: `b` itself when it is already f32, else a widened copy (bf16 only).
Buffer widen_to_f32(const Buffer& b);

// Rounds f32 `wide` to nearest even into the bf16 buffer `out` of the same dims.
void narrow_to_bf16(const Buffer& wide, Buffer& out);

// Runs an f32 kernel on bf16 data: bf16 array inputs are widened, the kernel writes an f32
// result, which is rounded once into the bf16 output (as the interpreter rounds the exact
// result once). For data-bound ops (reductions, scatter_add) whose kernels treat every
// non-f64 dtype as f32; far cheaper than the reference fallback's 8-byte literals.
Kernel via_f32(Kernel f32_kernel);

}  // namespace kiln::backend::cpu
