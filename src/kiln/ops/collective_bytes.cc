#include "kiln/ops/collective_bytes.h"

#include <algorithm>

#include "kiln/ops/registry.h"

namespace kiln::ops {

std::optional<int64_t> collective_bytes(const ir::Instr& instr) {
  const OpDef& def = op_def(instr.opcode());
  const ir::Opcode op = def.async_role == AsyncRole::kStart ? def.async_of : instr.opcode();
  switch (op) {
    case ir::Opcode::kAllGather: return instr.shape().byte_size();  // what arrives
    case ir::Opcode::kReduceScatter:
    case ir::Opcode::kAllReduce: return instr.operand(0)->shape().byte_size();  // what is summed
    case ir::Opcode::kRaggedAllToAll:  // the whole buffer
      return std::max(instr.operand(0)->shape().byte_size(), instr.shape().byte_size());
    default: return std::nullopt;
  }
}

}  // namespace kiln::ops
