// bf16 <-> f32 conversion of whole buffers, for kernels that compute bf16 operands through
// f32 library calls (GEMMs, grouped matmuls): widen the inputs, round the result.
#pragma once

#include "kiln/backend/buffer.h"

namespace kiln::backend::cpu {

// An f32 view of `b`: `b` itself when it is already f32, else a widened copy (bf16 only).
Buffer widen_to_f32(const Buffer& b);

// Rounds f32 `wide` to nearest even into the bf16 buffer `out` of the same dims.
void narrow_to_bf16(const Buffer& wide, Buffer& out);

}  // namespace kiln::backend::cpu
