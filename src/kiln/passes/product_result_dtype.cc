#include "kiln/passes/product_result_dtype.h"

#include <vector>

#include "kiln/base/logging.h"
#include "kiln/ops/registry.h"

namespace kiln::passes {
namespace {

// Ops that only move values (a dense weight gradient is transpose(dot_general)): the
// product's dtype may change under them.
bool moves_values(const ir::Instr& instr) {
  return instr.opcode() == ir::Opcode::kTranspose || instr.opcode() == ir::Opcode::kReshape;
}

// The product under `convert`, through single-reader transposes and reshapes (collected in
// `chain`, product first), or null.
ir::Instr* product_under(ir::Instr& convert, std::vector<ir::Instr*>& chain) {
  ir::Instr* at = convert.operand(0);
  chain.clear();
  while (moves_values(*at) && at->users().size() == 1) {
    chain.insert(chain.begin(), at);
    at = at->operand(0);
  }
  if (!ops::op_def(at->opcode()).declared_result_dtype) return nullptr;
  chain.insert(chain.begin(), at);
  return at;
}

// Empty when `convert` may be folded into the product under it; otherwise why not.
std::string_view decline_reason(const ir::Instr& convert, const ir::Instr& product) {
  const ir::DType from = product.shape().dtype(), to = convert.shape().dtype();
  if (!ir::is_floating(from) || !ir::is_floating(to) || ir::dtype_size(to) < ir::dtype_size(from)) {
    return "not a widening floating convert";
  }
  if (product.users().size() != 1) return "the product has other users, which read the rounded value";
  const auto &ps = convert.operand(0)->meta().sharding, &cs = convert.meta().sharding;
  if (ps && cs && *ps != *cs) return "the convert's operand and the convert carry different shardings";
  return {};
}

}  // namespace

Result<bool> ProductResultDtypePass::run(ir::Module& module) {
  bool changed = false;
  for (const auto& comp : module.computations()) {
    std::vector<ir::Instr*> converts;
    for (const auto& instr : comp->instructions()) {
      if (instr->opcode() == ir::Opcode::kConvert) converts.push_back(instr.get());
    }
    std::vector<ir::Instr*> folded, chain;
    for (ir::Instr* convert : converts) {
      ir::Instr* product = product_under(*convert, chain);
      if (product == nullptr) continue;
      std::string_view reason = decline_reason(*convert, *product);
      if (!reason.empty()) {
        KILN_VLOG(2) << "product_result_dtype: keeps %" << convert->id() << ": " << reason;
        continue;
      }
      for (ir::Instr* instr : chain) instr->set_shape(instr->shape().with_dtype(convert->shape().dtype()));
      ir::Instr* top = chain.back();
      if (!top->meta().sharding) top->mutable_meta().sharding = convert->meta().sharding;
      convert->replace_all_uses_with(top);
      folded.push_back(convert);
    }
    if (!folded.empty()) {
      comp->remove(folded);
      changed = true;
    }
  }
  return changed;
}

}  // namespace kiln::passes
