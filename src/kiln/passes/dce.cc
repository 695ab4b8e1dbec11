#include "kiln/passes/dce.h"

#include <unordered_set>

#include "kiln/base/logging.h"

namespace kiln::passes {

int64_t remove_dead_instructions(ir::Computation& computation) {
  // Program order is topological, so one backward sweep decides liveness: an instruction is
  // live when it is the root, a parameter, or used by a live instruction (all of which come
  // after it, so were decided already: a user is live unless it was found dead). The dead are
  // few, so only they are kept in a set.
  const auto& instrs = computation.instructions();
  std::unordered_set<const ir::Instr*> dead_set;
  std::vector<ir::Instr*> dead;
  for (auto it = instrs.rbegin(); it != instrs.rend(); ++it) {
    ir::Instr* instr = it->get();
    bool is_live = instr == computation.root() || instr->opcode() == ir::Opcode::kParameter;
    for (const ir::Instr* user : instr->users()) is_live = is_live || dead_set.count(user) == 0;
    if (!is_live) {
      dead_set.insert(instr);
      dead.push_back(instr);
    }
  }
  if (!dead.empty()) computation.remove(dead);
  return static_cast<int64_t>(dead.size());
}

int64_t remove_if_dead(ir::Computation& computation, const std::vector<ir::Instr*>& candidates) {
  // Worklist over candidates and the operands they release. An instruction is removed once:
  // `doomed` holds those already queued for removal, and an operand becomes dead when all of
  // its users are doomed.
  std::unordered_set<ir::Instr*> doomed;
  std::vector<ir::Instr*> order;
  std::vector<ir::Instr*> work(candidates.begin(), candidates.end());
  auto all_users_doomed = [&](const ir::Instr* instr) {
    for (ir::Instr* user : instr->users()) {
      if (!doomed.count(user)) return false;
    }
    return true;
  };
  while (!work.empty()) {
    ir::Instr* instr = work.back();
    work.pop_back();
    if (doomed.count(instr) || instr == computation.root() || instr->opcode() == ir::Opcode::kParameter) continue;
    if (!all_users_doomed(instr)) continue;
    doomed.insert(instr);
    order.push_back(instr);
    for (ir::Instr* operand : instr->operands()) work.push_back(operand);
  }
  if (!order.empty()) computation.remove(order);
  return static_cast<int64_t>(order.size());
}

Result<bool> DcePass::run(ir::Module& module) {
  int64_t removed = 0;
  for (const auto& comp : module.computations()) removed += remove_dead_instructions(*comp);

  // Computations reachable from the entry through `calls=`; the rest are removed.
  std::unordered_set<const ir::Computation*> reachable;
  std::vector<const ir::Computation*> work = {module.entry()};
  while (!work.empty()) {
    const ir::Computation* c = work.back();
    work.pop_back();
    if (!c || !reachable.insert(c).second) continue;
    for (const auto& instr : c->instructions()) {
      for (const ir::Computation* called : instr->called()) work.push_back(called);
    }
  }
  std::vector<ir::Computation*> unreachable;
  for (const auto& comp : module.computations()) {
    if (!reachable.count(comp.get())) unreachable.push_back(comp.get());
  }
  // Unreachable computations may call each other; drop their instructions' calls first so
  // that no removal sees a caller left behind.
  for (ir::Computation* comp : unreachable) {
    for (const auto& instr : comp->instructions()) instr->set_called({});
  }
  for (ir::Computation* comp : unreachable) {
    KILN_VLOG(2) << "dce: removing computation @" << comp->name() << " (no instruction calls it)";
  }
  if (!unreachable.empty()) module.remove_computations(unreachable);  // one scan of the module
  if (removed > 0) {
    KILN_VLOG(2) << "dce: removed " << removed << " instructions";
  }
  return removed > 0 || !unreachable.empty();
}

}  // namespace kiln::passes
