#include "kiln/spmd/batch_tuple_ops.h"

#include "kiln/ops/registry.h"

namespace kiln::spmd {

std::optional<BatchTupleRule> batch_tuple_rule(const ir::Instr& instr) {
  if (!instr.shape().is_tuple()) return std::nullopt;
  const int elements = static_cast<int>(instr.shape().elements().size());
  BatchTupleRule rule;
  switch (instr.opcode()) {
    case ir::Opcode::kAttention:
      rule.element_batch.assign(elements, true);  // out [B,T,H,Dh], lse [B,H,T]
      break;
    case ir::Opcode::kAttentionGrad:
      // dq, dk, dv [B,...]; dsinks [H] (present with sinks) sums over the batch.
      rule.element_batch.assign(elements, true);
      if (elements == 4) rule.element_batch[3] = false;
      break;
    case ir::Opcode::kSort:
    case ir::Opcode::kTopK:
      // Rows along the last dimension are ordered on their own: with a leading dimension
      // (the MoE's token shards, the router's batch) each device orders its own rows.
      // A rank-1 operand is one row: its only dimension is the ordered one.
      if (instr.operand(0)->shape().rank() < 2) return std::nullopt;
      rule.element_batch.assign(elements, true);  // values and indices
      break;
    default:
      return std::nullopt;
  }
  // The operands whose batch the op's own rule maps to the result's batch (dim 0 -> 0).
  std::vector<std::vector<int>> m = ops::op_def(instr.opcode()).dim_map(instr);
  for (int i = 0; i < instr.num_operands(); ++i) {
    const ir::Instr* o = instr.operand(i);
    bool batch = i < static_cast<int>(m.size()) && !m[i].empty() && m[i][0] == 0 && !o->shape().is_tuple() &&
                 o->shape().rank() > 0;
    rule.operand_batch.push_back(batch);
  }
  return rule;
}

Spec batch_tuple_element(const BatchTupleRule& rule, const Axes& batch, int element, int rank, bool partial) {
  Spec s = Spec::replicated(rank);
  if (batch.empty()) return s;
  if (rule.element_batch.at(element)) {
    s.dims[0] = batch;
  } else if (partial) {
    s.partial = batch;
  }
  return s;
}

}  // namespace kiln::spmd
