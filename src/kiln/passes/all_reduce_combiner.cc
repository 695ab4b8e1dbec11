#include "kiln/passes/all_reduce_combiner.h"

#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/builder.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

bool is_candidate(const Instr& i) {
  return i.opcode() == Opcode::kAllReduce && !i.shape().is_tuple() &&
         i.operand(0)->shape().byte_size() <= AllReduceCombinerPass::kMaxCombinedBytes;
}

}  // namespace

Result<bool> AllReduceCombinerPass::run(ir::Module& module) {
  removed_ = 0;
  ir::Computation& comp = *module.entry();
  std::vector<Instr*> order = comp.post_order();

  // Longest count of all-reduces on a path reaching each value (the value itself included).
  std::unordered_map<const Instr*, int64_t> level;
  // Groups in program order of their first member: (level, dtype, group) -> members.
  std::map<std::tuple<int64_t, std::string, std::string>, std::vector<Instr*>> groups;
  std::vector<std::tuple<int64_t, std::string, std::string>> first_seen;
  for (Instr* i : order) {
    int64_t l = 0;
    for (const Instr* o : i->operands()) l = std::max(l, level[o]);
    if (i->opcode() == Opcode::kAllReduce) ++l;
    level[i] = l;
    if (!is_candidate(*i)) continue;
    auto key = std::make_tuple(l, std::string(ir::dtype_name(i->shape().dtype())),
                               fmt::format("{}/{}", i->attrs().get_string("mesh_axes"), i->attrs().get_int("group_size")));
    auto [it, inserted] = groups.try_emplace(key);
    if (inserted) first_seen.push_back(key);
    it->second.push_back(i);
  }

  ops::Builder b(&comp);
  for (const auto& key : first_seen) {
    const std::vector<Instr*>& members = groups.at(key);
    if (members.size() < 2) continue;
    std::vector<Instr*> flat;
    std::vector<int64_t> sizes;
    for (Instr* m : members) {
      const int64_t k = m->shape().num_elements();
      sizes.push_back(k);
      flat.push_back(b.reshape(m->operand(0), {k}));
    }
    Instr* combined = b.emit(Opcode::kAllReduce, {b.concatenate(flat, 0)}, members[0]->attrs());
    int64_t offset = 0;
    for (size_t j = 0; j < members.size(); ++j) {
      Instr* part = b.slice(combined, {offset}, {offset + sizes[j]});
      offset += sizes[j];
      Instr* back = b.reshape(part, members[j]->shape().dims());
      members[j]->replace_all_uses_with(back);
    }
    removed_ += static_cast<int64_t>(members.size()) - 1;
    KILN_VLOG(2) << fmt::format("all_reduce_combiner: {} all-reduces of {} over {} -> %{}", members.size(),
                                std::get<1>(key), std::get<2>(key), combined->id());
  }
  if (removed_ == 0) return false;
  // The merged all-reduces are unused now; their operands stay (the concatenation reads them).
  std::vector<Instr*> merged;
  for (const auto& key : first_seen) {
    const std::vector<Instr*>& members = groups.at(key);
    if (members.size() >= 2) merged.insert(merged.end(), members.begin(), members.end());
  }
  remove_if_dead(comp, merged);
  KILN_VLOG(1) << fmt::format("all_reduce_combiner: {} all-reduces merged away", removed_);
  comp.topo_sort();
  return true;
}

}  // namespace kiln::passes
