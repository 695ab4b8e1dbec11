#include "kiln/passes/reduce_scatter_combiner.h"

#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/builder.h"
#include "kiln/passes/combiner_groups.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {

using ir::Instr;
using ir::Opcode;

Result<bool> ReduceScatterCombinerPass::run(ir::Module& module) {
  removed_ = 0;
  KILN_ASSIGN_OR_RETURN(CombineLimits limits, combine_limits_from_env());
  ir::Computation& comp = *module.entry();
  std::vector<std::vector<Instr*>> groups = combinable_groups(comp, Opcode::kReduceScatter, limits);
  if (groups.empty()) return false;
  ops::Builder b(&comp);
  std::vector<Instr*> merged;
  for (const std::vector<Instr*>& members : groups) {
    const int64_t g = members[0]->attrs().get_int("group_size");
    // Each member's operand as [g, k_j]: row r is what device r receives.
    std::vector<Instr*> shares;
    std::vector<int64_t> sizes;
    for (Instr* m : members) {
      b.set_name(m->meta().name);
      const AroundDim a = around_dim(m->operand(0)->shape().dims(), m->attrs().get_int("dim"));
      const int64_t n = a.n / g, k = a.outer * n * a.inner;
      Instr* x = m->operand(0);
      if (a.outer > 1) x = b.transpose(b.reshape(x, {a.outer, g, n, a.inner}), {1, 0, 2, 3});  // [g, A, n, B]
      shares.push_back(b.reshape(x, {g, k}));
      sizes.push_back(k);
    }
    b.set_name(combined_name(members));
    Instr* packed = b.concatenate(shares, 1);  // [g, K]
    const int64_t total = packed->shape().dims()[1];
    ir::Attrs attrs = members[0]->attrs();
    attrs.set("dim", int64_t{0});
    Instr* summed = b.emit(Opcode::kReduceScatter, {b.reshape(packed, {g * total})}, attrs);  // [K]
    int64_t offset = 0;
    for (size_t j = 0; j < members.size(); ++j) {
      Instr* m = members[j];
      b.set_name(m->meta().name);
      Instr* back = b.reshape(b.slice(summed, {offset}, {offset + sizes[j]}), m->shape().dims());
      offset += sizes[j];
      back->mutable_meta() = m->meta();
      m->replace_all_uses_with(back);
      merged.push_back(m);
    }
    removed_ += static_cast<int64_t>(members.size()) - 1;
    KILN_VLOG(2) << fmt::format("reduce_scatter_combiner: {} reduce-scatters over {} -> %{} ({} elements)",
                                members.size(), members[0]->attrs().get_string("mesh_axes"), summed->id(), total);
  }
  // The merged reduce-scatters are unused now; their operands stay (the concatenation reads them).
  remove_if_dead(comp, merged);
  KILN_VLOG(1) << fmt::format("reduce_scatter_combiner: {} reduce-scatters merged away", removed_);
  comp.topo_sort();
  return true;
}

}  // namespace kiln::passes
