// Products that write the widened result directly.
//
//   %p = bf16[...] dot_general(bf16 a, bf16 b)      %p = f32[...] dot_general(bf16 a, bf16 b)
//   %c = f32[...] convert(%p)                   ->  (users of %c read %p)
//
// In bf16 mixed precision every weight gradient comes out of a bf16 product and is widened
// to f32 at once (the adjoint of the parameter's cast), and the logits are widened the same
// way (cast_logits_to_fp32). The product already accumulates in f32 (oneDNN, and double in
// the reference evaluation), so writing f32 directly drops one rounding to bf16 and a pass
// over the result. Applies to ops with OpDef::declared_result_dtype (dot_general,
// grouped_matmul, grouped_matmul_weight_grad) whose only user is a convert to a floating
// dtype at least as wide as the product's, directly or through transposes and reshapes that
// each have one reader (a dense weight gradient is transpose(dot_general); they then move
// the wide values). Declines, with a reason at KILN_VLOG(2), when the product has other
// users (they read the rounded value) or the convert's operand and the convert carry
// different shardings.
#pragma once

#include "kiln/passes/pass.h"

namespace kiln::passes {

class ProductResultDtypePass : public Pass {
 public:
  std::string_view name() const override { return "product_result_dtype"; }
  Result<bool> run(ir::Module& module) override;
};

}  // namespace kiln::passes
