#include "kiln/passes/grad_reduce_dtype.h"

#include <vector>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/ops/builder.h"
#include "kiln/passes/dce.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

bool is_gradient_reduction(const Instr& i) {
  return (i.opcode() == Opcode::kReduceScatter || i.opcode() == Opcode::kAllReduce) && i.num_operands() == 1 &&
         ir::is_floating(i.shape().dtype()) && i.meta().name.ends_with(".grad");
}

}  // namespace

Result<bool> GradReduceDtypePass::run(ir::Module& module) {
  ir::Computation& comp = *module.entry();
  ops::Builder b(&comp);
  std::vector<Instr*> reductions;
  for (const auto& i : comp.instructions()) {
    if (is_gradient_reduction(*i) && i->shape().dtype() != dtype_) reductions.push_back(i.get());
  }
  int64_t changed = 0;
  for (Instr* r : reductions) {
    const ir::DType original = r->shape().dtype();
    Instr* x = r->operand(0);
    b.set_name(r->meta().name);
    // The partial in the target dtype: the value it was rounded from, when it was.
    Instr* partial = x->opcode() == Opcode::kConvert && x->users().size() == 1 &&
                             x->operand(0)->shape().dtype() == dtype_
                         ? x->operand(0)
                         : nullptr;
    if (partial == nullptr) {
      partial = b.convert(x, dtype_);
      partial->mutable_meta().sharding = x->meta().sharding;
    }
    Instr* reduced = b.emit(r->opcode(), {partial}, r->attrs());
    reduced->mutable_meta() = r->meta();
    // Readers that widen to the target read the reduction itself; the others its value in
    // the original dtype.
    bool others = comp.root() == r;
    for (Instr* u : std::vector<Instr*>(r->users().begin(), r->users().end())) {
      if (u->opcode() == Opcode::kConvert && u->shape().dtype() == dtype_) {
        u->replace_all_uses_with(reduced);
      } else {
        others = true;
      }
    }
    if (others) {
      Instr* back = b.convert(reduced, original);
      back->mutable_meta().sharding = r->meta().sharding;
      r->replace_all_uses_with(back);
    }
    ++changed;
  }
  if (changed == 0) return false;
  remove_dead_instructions(comp);
  comp.topo_sort();
  KILN_VLOG(1) << fmt::format("grad_reduce_dtype: {} gradient reductions in {}", changed, ir::dtype_name(dtype_));
  return true;
}

}  // namespace kiln::passes
