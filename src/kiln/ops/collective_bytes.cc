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

std::map<std::string, CollectiveStats> count_collectives(const ir::Module& module) {
  std::map<std::string, CollectiveStats> stats;
  for (const auto& instr : module.entry()->instructions()) {
    const std::optional<int64_t> bytes = collective_bytes(*instr);
    if (!bytes) continue;
    CollectiveStats& s = stats[std::string(ir::opcode_name(instr->opcode()))];
    s.count += 1;
    s.bytes += *bytes;
  }
  return stats;
}

}  // namespace kiln::ops
