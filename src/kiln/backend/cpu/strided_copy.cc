#include "kiln/backend/cpu/strided_copy.h"

#include <cstring>

#include "kiln/ir/shape.h"

namespace kiln::backend::cpu {

namespace {

template <typename T>
void copy_rows(T* out, const T* in, const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides,
               int64_t in_offset, const std::vector<int64_t>& out_strides, int64_t out_offset) {
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    out[out_offset] = in[in_offset];
    return;
  }
  const int64_t inner = dims[rank - 1];
  const int64_t in_step = in_strides[rank - 1];
  const int64_t out_step = out_strides[rank - 1];
  int64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= dims[d];
#pragma omp parallel for schedule(static) if (rows * inner > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, src = in_offset, dst = out_offset;
    for (int d = rank - 2; d >= 0; --d) {
      int64_t i = rem % dims[d];
      rem /= dims[d];
      src += i * in_strides[d];
      dst += i * out_strides[d];
    }
    if (in_step == 1 && out_step == 1) {
      std::memcpy(out + dst, in + src, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t k = 0; k < inner; ++k) out[dst + k * out_step] = in[src + k * in_step];
    }
  }
}

}  // namespace

void strided_copy(void* out, const void* in, int element_size, const std::vector<int64_t>& out_dims,
                  const std::vector<int64_t>& in_strides, int64_t in_offset,
                  const std::vector<int64_t>& out_strides_given, int64_t out_offset) {
  std::vector<int64_t> out_strides = out_strides_given.empty() ? ir::row_major_strides(out_dims) : out_strides_given;
  switch (element_size) {
    case 1: copy_rows(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
    case 2: copy_rows(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
    case 4: copy_rows(static_cast<uint32_t*>(out), static_cast<const uint32_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
    default: copy_rows(static_cast<uint64_t*>(out), static_cast<const uint64_t*>(in), out_dims, in_strides, in_offset, out_strides, out_offset); break;
  }
}

}  // namespace kiln::backend::cpu
