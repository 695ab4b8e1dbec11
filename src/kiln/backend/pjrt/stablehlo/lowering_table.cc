#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

#include "kiln/base/check.h"

namespace kiln::backend::pjrt {

void LoweringTable::add(ir::Opcode opcode, LowerFn lower) {
  const auto i = static_cast<size_t>(opcode);
  KILN_CHECK(!present_[i]) << "two lowerings of " << ir::opcode_name(opcode);
  KILN_CHECK(lower != nullptr);
  entries_[i] = Lowering{std::move(lower), ""};
  present_[i] = true;
}

void LoweringTable::add_none(ir::Opcode opcode, std::string reason) {
  const auto i = static_cast<size_t>(opcode);
  KILN_CHECK(!present_[i]) << "two lowerings of " << ir::opcode_name(opcode);
  KILN_CHECK(!reason.empty()) << ir::opcode_name(opcode) << " has no lowering and no reason";
  entries_[i] = Lowering{nullptr, std::move(reason)};
  present_[i] = true;
}

const Lowering* LoweringTable::find(ir::Opcode opcode) const {
  const auto i = static_cast<size_t>(opcode);
  return present_[i] ? &entries_[i] : nullptr;
}

const LoweringTable& lowerings() {
  static const LoweringTable table = [] {
    LoweringTable t;
    register_structural_lowerings(t);
    register_elementwise_lowerings(t);
    register_shape_lowerings(t);
    register_reduce_lowerings(t);
    register_dot_lowerings(t);
    register_index_lowerings(t);
    register_sort_lowerings(t);
    register_rng_lowerings(t);
    register_attention_lowerings(t);
    register_grouped_matmul_lowerings(t);
    register_collective_lowerings(t);
    return t;
  }();
  return table;
}

const Val& array_operand(std::span<const Vals> operands, int i) {
  KILN_CHECK(i < static_cast<int>(operands.size()) && operands[i].size() == 1) << "operand " << i << " is not an array";
  return operands[i][0];
}

}  // namespace kiln::backend::pjrt
