#include "kiln/ops/op_helpers.h"

namespace kiln::ops {

void register_index_ops(OpTable& table) {}

}  // namespace kiln::ops
