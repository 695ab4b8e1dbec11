#include "kiln/passes/reduce_scatter_reassociate.h"

#include <optional>
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

// A convert that widens (bf16 -> f32), the one step besides rearrangements a chain may
// hold: the partials are then summed in the wider type and rounded once before the scatter.
bool widens(const Instr* x) {
  return x->opcode() == Opcode::kConvert && x->num_operands() == 1 &&
         ir::dtype_size(x->shape().dtype()) > ir::dtype_size(x->operand(0)->shape().dtype());
}

std::optional<Peeled> peel(Instr* x) {
  Peeled p;
  bool widened = false;
  while (x->users().size() == 1) {
    if (x->opcode() == Opcode::kReduceScatter) {
      p.scatter = x;
      return p;
    }
    const bool widening = widens(x) && !widened;
    if (!widening && (!ops::op_def(x->opcode()).rearranges || x->num_operands() != 1)) return std::nullopt;
    widened = widened || widening;
    p.chain.push_back(x);
    x = x->operand(0);
  }
  return std::nullopt;
}

// The wide type of a chain with a widening convert, or nullopt.
std::optional<ir::DType> wide_type(const Peeled& p) {
  for (const Instr* step : p.chain) {
    if (widens(step)) return step->shape().dtype();
  }
  return std::nullopt;
}

// `v` (an unreduced partial) in the wide type: the value it was rounded from when it is a
// narrowing convert of a wide value read by nothing else (an earlier merge's sum), so a
// chain of merges adds in the wide type throughout.
Instr* in_wide_type(ops::Builder& b, Instr* v, ir::DType wide) {
  if (v->opcode() == Opcode::kConvert && v->users().size() == 1 && v->operand(0)->shape().dtype() == wide) {
    return v->operand(0);
  }
  Instr* w = b.convert(v, wide);
  w->mutable_meta().sharding = v->meta().sharding;
  return w;
}

bool same_step(const Instr* a, const Instr* b) {
  return a->opcode() == b->opcode() && a->shape() == b->shape() && a->attrs() == b->attrs() &&
         a->operand(0)->shape() == b->operand(0)->shape();
}

}  // namespace

Result<bool> ReduceScatterReassociatePass::run(ir::Module& module) {
  ir::Computation& comp = *module.entry();
  ops::Builder b(&comp);
  // One sweep in post order: an add's operands come before it, so a chain of adds meets
  // each earlier merge's result as its operand (read by it alone). The replaced adds and
  // what only they read go at the end.
  std::vector<Instr*> replaced;
  for (Instr* add : comp.post_order()) {
    if (add->opcode() != Opcode::kAdd || add->num_operands() != 2 || add->operand(0) == add->operand(1)) continue;
    std::optional<Peeled> x = peel(add->operand(0)), y = peel(add->operand(1));
    if (!x || !y || x->chain.size() != y->chain.size() || !same_step(x->scatter, y->scatter)) continue;
    bool same_chain = true;
    for (size_t k = 0; k < x->chain.size() && same_chain; ++k) same_chain = same_step(x->chain[k], y->chain[k]);
    if (!same_chain) continue;
    // add(a, b) on the unreduced values, scattered once, then the chain again.
    b.set_name(add->meta().name);
    Instr* a_part = x->scatter->operand(0);
    Instr* b_part = y->scatter->operand(0);
    Instr* sum;
    if (std::optional<ir::DType> wide = wide_type(*x)) {
      // Summed in the wide type, rounded once to the scatter's type.
      Instr* a_wide = in_wide_type(b, a_part, *wide);
      Instr* b_wide = in_wide_type(b, b_part, *wide);
      Instr* wide_sum = b.add(a_wide, b_wide);
      wide_sum->mutable_meta().sharding = a_part->meta().sharding;
      sum = b.convert(wide_sum, a_part->shape().dtype());
    } else {
      sum = b.add(a_part, b_part);
    }
    sum->mutable_meta().sharding = a_part->meta().sharding;
    Instr* value = b.emit(Opcode::kReduceScatter, {sum}, x->scatter->attrs());
    value->mutable_meta() = x->scatter->meta();
    for (auto it = x->chain.rbegin(); it != x->chain.rend(); ++it) {
      Instr* step = widens(*it) ? b.convert(value, (*it)->shape().dtype()) : b.emit((*it)->opcode(), {value}, (*it)->attrs());
      step->mutable_meta() = (*it)->meta();
      value = step;
    }
    add->replace_all_uses_with(value);
    replaced.push_back(add);
    KILN_VLOG(2) << fmt::format("reduce_scatter_reassociate: %{} = %{} + %{} scattered once", value->id(),
                                a_part->id(), b_part->id());
  }
  const int64_t merged = static_cast<int64_t>(replaced.size());
  if (merged == 0) return false;
  remove_if_dead(comp, replaced);
  comp.topo_sort();
  KILN_VLOG(1) << fmt::format("reduce_scatter_reassociate: {} reduce-scatters merged away", merged);
  return true;
}

}  // namespace kiln::passes
