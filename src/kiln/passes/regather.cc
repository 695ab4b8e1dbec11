#include "kiln/passes/regather.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/registry.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

// Ops that only rearrange or convert state: a gather of their result is a gather of state.
// Leaves (parameters, literals), elementwise ops and layout ops (OpDef::rearranges).
bool is_state_op(const Instr& i) {
  const ops::OpDef& def = ops::op_def(i.opcode());
  if (def.plumbing && i.num_operands() == 0) return true;
  return def.elementwise || def.rearranges;
}

}  // namespace

Result<bool> RegatherPass::run(ir::Module& module) {
  regathered_ = 0;
  bytes_ = 0;
  // KILN_REGATHER=0 keeps the forward's gathered weights (to measure what regathering saves).
  if (const char* e = std::getenv("KILN_REGATHER"); e != nullptr && std::string_view(e) == "0") return false;
  ir::Computation& comp = *module.entry();
  std::vector<Instr*> order = comp.post_order();

  // Backward code: gradients, remat's recomputed forward values and everything computed
  // from them. State: values computed from entry parameters and constants alone.
  std::unordered_set<const Instr*> backward, state;
  for (Instr* i : order) {
    bool b = i->meta().name.ends_with(".grad") || i->meta().name.ends_with(".remat");
    bool s = is_state_op(*i);
    for (const Instr* o : i->operands()) {
      b = b || backward.count(o) > 0;
      s = s && state.count(o) > 0;
    }
    if (b) backward.insert(i);
    if (s && !b) state.insert(i);
  }

  // Gathered weights: all-gathers of state, and what rearranging ops (a convert to bf16, a
  // reshape) make of them. These are what the backward pass gets its own copies of.
  std::unordered_set<const Instr*> gathered;
  for (Instr* i : order) {
    if (backward.count(i) || i->meta().name.ends_with(".regather")) continue;
    bool g = i->opcode() == Opcode::kAllGather && state.count(i->operand(0));
    if (!g && is_state_op(*i) && i->opcode() != Opcode::kParameter && i->num_operands() > 0) {
      bool any = false, all = true;
      for (const Instr* o : i->operands()) {
        any = any || gathered.count(o) > 0;
        all = all && (gathered.count(o) > 0 || state.count(o) > 0);
      }
      g = any && all;
    }
    if (g) gathered.insert(i);
  }

  // One clone per gathered value, built from state and other clones.
  std::unordered_map<const Instr*, Instr*> clone_of;
  std::function<Instr*(Instr*)> clone = [&](Instr* v) -> Instr* {
    if (!gathered.count(v)) return v;
    if (auto it = clone_of.find(v); it != clone_of.end()) return it->second;
    std::vector<Instr*> operands;
    for (Instr* o : v->operands()) operands.push_back(clone(o));
    Instr* copy = comp.add(v->opcode(), v->shape(), std::move(operands), v->attrs());
    copy->set_called(v->called());
    copy->mutable_meta() = v->meta();
    copy->mutable_meta().name = (v->meta().name.empty() ? std::string(ir::opcode_name(v->opcode())) : v->meta().name) +
                                ".regather";
    if (v->opcode() == Opcode::kAllGather) {
      ++regathered_;
      bytes_ += v->shape().byte_size();
    }
    clone_of[v] = copy;
    return copy;
  };

  for (Instr* v : order) {
    if (!gathered.count(v)) continue;
    std::vector<Instr*> backward_users;
    bool forward_user = false;
    for (Instr* u : v->users()) {
      if (!backward.count(u)) {
        forward_user = true;
      } else if (std::find(backward_users.begin(), backward_users.end(), u) == backward_users.end()) {
        backward_users.push_back(u);
      }
    }
    if (!forward_user || backward_users.empty()) continue;
    Instr* copy = clone(v);
    for (Instr* u : backward_users) {
      for (int k = 0; k < u->num_operands(); ++k) {
        if (u->operand(k) == v) u->replace_operand(k, copy);
      }
    }
    KILN_VLOG(2) << fmt::format("regather: %{} computed again for {} backward user(s)", v->id(), backward_users.size());
  }
  KILN_VLOG(1) << fmt::format("regather: {} all-gathers repeated in the backward pass ({} bytes)", regathered_, bytes_);
  if (clone_of.empty()) return false;
  comp.topo_sort();
  return true;
}

}  // namespace kiln::passes
