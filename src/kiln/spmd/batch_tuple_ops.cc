#include "kiln/spmd/batch_tuple_ops.h"

#include "kiln/ops/registry.h"

namespace kiln::spmd {

std::optional<BatchTupleRule> batch_tuple_rule(const ir::Instr& instr) {
  if (!instr.shape().is_tuple()) return std::nullopt;
  const ops::OpDef& def = ops::op_def(instr.opcode());
  if (!def.batch_rows) return std::nullopt;
  BatchTupleRule rule;
  rule.element_batch = def.batch_rows(instr);
  if (rule.element_batch.empty()) return std::nullopt;
  // The operands whose batch the op's own rule maps to the result's batch (dim 0 -> 0).
  std::vector<std::vector<int>> m = def.dim_map(instr);
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
