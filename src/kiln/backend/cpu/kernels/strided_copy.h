// One loop nest for every pure data-movement op: result element at index i is read from
// input offset `offset + sum_d i[d] * in_strides[d]` (strides in elements; 0 broadcasts).
// Transpose, broadcast, slice and concatenate pieces are all this copy with other strides.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::backend::cpu {

void strided_copy(void* out, const void* in, int element_size, const std::vector<int64_t>& out_dims,
                  const std::vector<int64_t>& in_strides, int64_t in_offset,
                  const std::vector<int64_t>& out_strides = {}, int64_t out_offset = 0);

}  // namespace kiln::backend::cpu
