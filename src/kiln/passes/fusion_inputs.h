// The operands of a fusion being outlined: one parameter of its body per distinct outside
// value the body reads, numbered in the order first read. FusionPass and
// MultiOutputFusionPass both build bodies this way.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiln/ir/instr.h"

namespace kiln::passes {

class FusionInputs {
 public:
  explicit FusionInputs(ir::Computation& body) : body_(body) {}

  // The body's parameter standing for `outside`, added on first use.
  ir::Instr* param_for(ir::Instr* outside) {
    auto it = param_of_.find(outside);
    if (it != param_of_.end()) return it->second;
    ir::Instr* p = body_.add(ir::Opcode::kParameter, outside->shape(), {},
                             {{"index", static_cast<int64_t>(inputs_.size())}});
    inputs_.push_back(outside);
    param_of_[outside] = p;
    return p;
  }
  // The fusion instruction's operands, in parameter order.
  const std::vector<ir::Instr*>& inputs() const { return inputs_; }

 private:
  ir::Computation& body_;
  std::vector<ir::Instr*> inputs_;
  std::unordered_map<const ir::Instr*, ir::Instr*> param_of_;
};

}  // namespace kiln::passes
