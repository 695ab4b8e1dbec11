#include "kiln/passes/reduce_scatter_reassociate.h"

#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

// The chain from a reduce-scatter up to `x` (x's rearrangements, outermost first), or
// nullopt when x is not a reduce-scatter seen through single-reader rearrangements.
struct Peeled {
  Instr* scatter = nullptr;
  std::vector<Instr*> chain;  // outermost (x itself) first
};

std::optional<Peeled> peel(Instr* x) {
  Peeled p;
  while (x->users().size() == 1) {
    if (x->opcode() == Opcode::kReduceScatter) {
      p.scatter = x;
      return p;
    }
    if (!ops::op_def(x->opcode()).rearranges || x->num_operands() != 1) return std::nullopt;
    p.chain.push_back(x);
    x = x->operand(0);
  }
  return std::nullopt;
}

bool same_step(const Instr* a, const Instr* b) {
  return a->opcode() == b->opcode() && a->shape() == b->shape() && a->attrs() == b->attrs() &&
         a->operand(0)->shape() == b->operand(0)->shape();
}

}  // namespace

Result<bool> ReduceScatterReassociatePass::run(ir::Module& module) {
  ir::Computation& comp = *module.entry();
  ops::Builder b(&comp);
  int64_t merged = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    for (Instr* add : comp.post_order()) {
      if (add->opcode() != Opcode::kAdd || add->num_operands() != 2 || add->operand(0) == add->operand(1)) continue;
      std::optional<Peeled> x = peel(add->operand(0)), y = peel(add->operand(1));
      if (!x || !y || x->chain.size() != y->chain.size() || !same_step(x->scatter, y->scatter)) continue;
      bool same_chain = true;
      for (size_t k = 0; k < x->chain.size() && same_chain; ++k) same_chain = same_step(x->chain[k], y->chain[k]);
      if (!same_chain) continue;
      // add(a, b) on the unreduced values, scattered once, then the chain again.
      b.set_name(add->meta().name);
      Instr* sum = b.add(x->scatter->operand(0), y->scatter->operand(0));
      sum->mutable_meta().sharding = x->scatter->operand(0)->meta().sharding;
      Instr* value = b.emit(Opcode::kReduceScatter, {sum}, x->scatter->attrs());
      value->mutable_meta() = x->scatter->meta();
      for (auto it = x->chain.rbegin(); it != x->chain.rend(); ++it) {
        Instr* step = b.emit((*it)->opcode(), {value}, (*it)->attrs());
        step->mutable_meta() = (*it)->meta();
        value = step;
      }
      add->replace_all_uses_with(value);
      // (The replaced add, its scatters and their chains: a later sweep must not see them.)
      remove_if_dead(comp, {add});
      ++merged;
      changed = true;
      KILN_VLOG(2) << fmt::format("reduce_scatter_reassociate: %{} = %{} + %{} scattered once", value->id(),
                                  x->scatter->operand(0)->id(), y->scatter->operand(0)->id());
      break;  // the post order is stale now
    }
  }
  if (merged == 0) return false;
  comp.topo_sort();
  KILN_VLOG(1) << fmt::format("reduce_scatter_reassociate: {} reduce-scatters merged away", merged);
  return true;
}

}  // namespace kiln::passes
