// NumPy .npy files (format version 1.0): the token-id input of `kiln forward` and its logits
// and loss outputs, so Python tools read them with numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::app {

struct NpyIds {
  std::vector<int64_t> dims;  // [N] or [B, N]
  std::vector<int64_t> values;
};

// Reads integer ids: dtypes <i4, <i8, <u2, <u4 (C order), rank 1 or 2.
Result<NpyIds> read_npy_ids(const std::string& path);
// Writes little-endian float32 ("<f4") values of shape `dims`.
Status write_npy_f32(const std::string& path, const std::vector<int64_t>& dims, const std::vector<float>& values);

}  // namespace kiln::app
