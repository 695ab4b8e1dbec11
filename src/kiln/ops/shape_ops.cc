#include "kiln/ops/op_helpers.h"

namespace kiln::ops {

void register_shape_ops(OpTable& table) {}

}  // namespace kiln::ops
