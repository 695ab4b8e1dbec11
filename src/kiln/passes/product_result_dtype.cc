#include "kiln/passes/product_result_dtype.h"

#include <vector>

#include "kiln/base/logging.h"
#include "kiln/ops/registry.h"

namespace kiln::passes {
namespace {

// Empty when `convert` may be folded into its operand; otherwise why not.
std::string_view decline_reason(const ir::Instr& convert) {
  const ir::Instr& product = *convert.operand(0);
  if (!ops::op_def(product.opcode()).declared_result_dtype) return "operand is not a product";
  const ir::DType from = product.shape().dtype(), to = convert.shape().dtype();
  if (!ir::is_floating(from) || !ir::is_floating(to) || ir::dtype_size(to) < ir::dtype_size(from)) {
    return "not a widening floating convert";
  }
  if (product.users().size() != 1) return "the product has other users, which read the rounded value";
  const auto &ps = product.meta().sharding, &cs = convert.meta().sharding;
  if (ps && cs && *ps != *cs) return "the product and the convert carry different shardings";
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
    std::vector<ir::Instr*> folded;
    for (ir::Instr* convert : converts) {
      std::string_view reason = decline_reason(*convert);
      if (!reason.empty()) {
        if (ops::op_def(convert->operand(0)->opcode()).declared_result_dtype) {
          KILN_VLOG(2) << "product_result_dtype: keeps %" << convert->id() << ": " << reason;
        }
        continue;
      }
      ir::Instr* product = convert->operand(0);
      product->set_shape(convert->shape());
      if (!product->meta().sharding) product->mutable_meta().sharding = convert->meta().sharding;
      convert->replace_all_uses_with(product);
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
