#include "kiln/spmd/ragged_exchange.h"

namespace kiln::spmd {

namespace {

// The trailing axes of `split` whose sizes multiply to g.
std::optional<Axes> trailing_axes(const Axes& split, int64_t g, const config::Mesh& mesh) {
  int64_t product = 1;
  size_t first = split.size();
  while (product < g && first > 0) product *= mesh.size(split[--first]);
  if (product != g) return std::nullopt;
  return Axes(split.begin() + static_cast<std::ptrdiff_t>(first), split.end());
}

}  // namespace

std::optional<Axes> ragged_exchange_axes(const ir::Instr& instr, const Axes& split, const config::Mesh& mesh) {
  if (instr.opcode() != ir::Opcode::kRaggedAllToAll || instr.attrs().has("mesh_axes") || split.empty()) {
    return std::nullopt;
  }
  if (instr.operand(0)->shape().dim(0) != mesh.size(split)) return std::nullopt;  // one entry per device
  return trailing_axes(split, instr.attrs().get_int("group_size"), mesh);
}

std::optional<Axes> expert_block_axes(const ir::Instr& instr, const Axes& split, const config::Mesh& mesh) {
  const bool gmm = instr.opcode() == ir::Opcode::kGroupedMatmul;
  if ((!gmm && instr.opcode() != ir::Opcode::kGroupedMatmulWeightGrad) || split.empty()) return std::nullopt;
  const ir::Shape& x = instr.operand(0)->shape();
  if (x.rank() != 3 || x.dim(0) != mesh.size(split)) return std::nullopt;
  const int64_t experts = gmm ? instr.operand(1)->shape().dim(0) : instr.attrs().get_int("num_groups");
  return trailing_axes(split, experts / instr.operand(2)->shape().dim(1), mesh);
}

Spec ragged_exchange_spec(const ir::Instr& instr, const Axes& split) {
  Spec s = Spec::replicated(instr.shape().rank());
  s.dims[0] = split;
  return s;
}

}  // namespace kiln::spmd
