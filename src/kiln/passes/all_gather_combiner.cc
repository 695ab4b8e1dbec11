#include "kiln/passes/all_gather_combiner.h"

#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/builder.h"
#include "kiln/passes/combiner_groups.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {

using ir::Instr;
using ir::Opcode;

Result<bool> AllGatherCombinerPass::run(ir::Module& module) {
  removed_ = 0;
  KILN_ASSIGN_OR_RETURN(CombineLimits limits, combine_limits_from_env());
  ir::Computation& comp = *module.entry();
  std::vector<std::vector<Instr*>> groups = combinable_groups(comp, Opcode::kAllGather, limits);
  if (groups.empty()) return false;
  ops::Builder b(&comp);
  std::vector<Instr*> merged;
  for (const std::vector<Instr*>& members : groups) {
    const int64_t g = members[0]->attrs().get_int("group_size");
    b.set_name(combined_name(members));
    std::vector<Instr*> flat;
    int64_t total = 0;
    for (Instr* m : members) {
      const int64_t k = m->operand(0)->shape().num_elements();
      flat.push_back(b.reshape(m->operand(0), {k}));
      total += k;
    }
    ir::Attrs attrs = members[0]->attrs();
    attrs.set("dim", int64_t{0});
    Instr* gathered = b.emit(Opcode::kAllGather, {b.concatenate(flat, 0)}, attrs);  // [g * K]
    Instr* by_device = b.reshape(gathered, {g, total});
    int64_t offset = 0;
    for (Instr* m : members) {
      b.set_name(m->meta().name);
      const std::vector<int64_t>& x = m->operand(0)->shape().dims();
      const AroundDim a = around_dim(x, m->attrs().get_int("dim"));
      const int64_t k = a.outer * a.n * a.inner;
      Instr* part = b.slice(by_device, {0, offset}, {g, offset + k});  // [g, k]: every device's x_j
      offset += k;
      if (a.outer > 1) {
        // [g, A, n, B] -> [A, g, n, B]: device r's chunk goes after the others' in each row.
        part = b.transpose(b.reshape(part, {g, a.outer, a.n, a.inner}), {1, 0, 2, 3});
      }
      Instr* back = b.reshape(part, m->shape().dims());
      back->mutable_meta() = m->meta();
      m->replace_all_uses_with(back);
      merged.push_back(m);
    }
    removed_ += static_cast<int64_t>(members.size()) - 1;
    KILN_VLOG(2) << fmt::format("all_gather_combiner: {} all-gathers over {} -> %{} ({} elements)", members.size(),
                                members[0]->attrs().get_string("mesh_axes"), gathered->id(), g * total);
  }
  // The merged all-gathers are unused now; their operands stay (the concatenation reads them).
  remove_if_dead(comp, merged);
  KILN_VLOG(1) << fmt::format("all_gather_combiner: {} all-gathers merged away", removed_);
  comp.topo_sort();
  return true;
}

}  // namespace kiln::passes
