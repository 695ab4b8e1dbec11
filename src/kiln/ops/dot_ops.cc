#include "kiln/ops/op_helpers.h"

namespace kiln::ops {

void register_dot_ops(OpTable& table) {}

}  // namespace kiln::ops
