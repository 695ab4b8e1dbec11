// bf16 <-> f32 conversion of whole buffers, for kernels that compute bf16 operands through
// f32 library calls (GEMMs, grouped matmuls): widen the inputs, round the result.
#pragma once

#include "kiln/backend/buffer.h"
#include "kiln/backend/cpu/kernel.h"

namespace kiln::backend::cpu {

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
