#include "kiln/spmd/ragged_exchange.h"

namespace kiln::spmd {

std::optional<Axes> ragged_exchange_axes(const ir::Instr& instr, const Axes& split, const Mesh& mesh) {
  if (instr.opcode() != ir::Opcode::kRaggedAllToAll || instr.attrs().has("mesh_axes") || split.empty()) {
    return std::nullopt;
  }
  if (instr.operand(0)->shape().dim(0) != mesh.size(split)) return std::nullopt;  // one entry per device
  const int64_t g = instr.attrs().get_int("group_size");
  int64_t product = 1;
  size_t first = split.size();
  while (product < g && first > 0) product *= mesh.size(split[--first]);
  if (product != g) return std::nullopt;
  return Axes(split.begin() + static_cast<std::ptrdiff_t>(first), split.end());
}

Spec ragged_exchange_spec(const ir::Instr& instr, const Axes& split) {
  Spec s = Spec::replicated(instr.shape().rank());
  s.dims[0] = split;
  return s;
}

}  // namespace kiln::spmd
