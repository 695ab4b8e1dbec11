#include "kiln/ir/verifier.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace kiln::ir {

namespace {

Status instr_error(const Instr& instr, const std::string& message) {
  return invalid_argument("{} in: {}", message, instr.to_string());
}

}  // namespace

Status verify_structure(const Module& module) {
  if (!module.entry()) return invalid_argument("module @{} has no entry computation", module.name());
  std::unordered_set<std::string> ids;
  for (const auto& comp : module.computations()) {
    if (!comp->root()) return invalid_argument("computation @{} has no root", comp->name());
    std::unordered_set<const Instr*> defined;
    bool root_seen = false;
    for (const auto& owned : comp->instructions()) {
      const Instr& instr = *owned;
      if (!ids.insert(instr.id()).second) return instr_error(instr, "duplicate id %" + instr.id());
      if (instr.parent() != comp.get()) return instr_error(instr, "wrong parent computation");
      for (const Instr* operand : instr.operands()) {
        if (!defined.count(operand)) {
          return instr_error(instr, "operand %" + operand->id() + " is not defined before its use in @" + comp->name());
        }
        const auto& users = operand->users();
        auto uses = std::count(instr.operands().begin(), instr.operands().end(), operand);
        if (std::count(users.begin(), users.end(), &instr) != uses) {
          return instr_error(instr, "user list of %" + operand->id() + " is out of date");
        }
      }
      const Metadata& meta = instr.meta();
      if (!meta.axes.empty()) {
        if (instr.shape().is_tuple() || static_cast<int>(meta.axes.size()) != instr.shape().rank()) {
          return instr_error(instr, "axes= names " + std::to_string(meta.axes.size()) + " dimensions of a value of shape " +
                                        instr.shape().to_string());
        }
      }
      if (meta.sharding) {
        if (instr.shape().is_tuple() || static_cast<int>(meta.sharding->dims.size()) != instr.shape().rank()) {
          return instr_error(instr, "sharding= has " + std::to_string(meta.sharding->dims.size()) +
                                        " dimensions for a value of shape " + instr.shape().to_string());
        }
      }
      for (const Computation* called : instr.called()) {
        if (called->parent() != &module) return instr_error(instr, "calls a computation of another module");
      }
      if (instr.opcode() == Opcode::kConstant && !instr.has_literal()) return instr_error(instr, "constant without a value");
      if (&instr == comp->root()) root_seen = true;
      defined.insert(&instr);
    }
    if (!root_seen) return invalid_argument("root of @{} is not one of its instructions", comp->name());
    for (int i = 0; i < comp->num_params(); ++i) {
      if (!comp->param(i)) return invalid_argument("computation @{} lacks parameter index {}", comp->name(), i);
    }
  }
  return ok_status();
}

}  // namespace kiln::ir
