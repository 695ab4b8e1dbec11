// GradReduceDtypePass ("grad_reduce_dtype"): the gradients' cross-device reductions in the
// dtype the config names (grad_reduce_dtype). The partitioner reduces a weight's partial
// gradient where the product made it, in the compute dtype: bf16 in mixed precision, then
// widened to the f32 master weight's gradient (as XLA does for MaxText). float32 instead
// sums the devices' partials in f32 (64 devices' bf16 partials lose about 3 bits; the wire
// and the unreduced buffers are twice as large); bfloat16 halves an f32 program's.
//
//   %r = bf16 reduce_scatter(%g)            %w = f32 convert(%g)
//   %c = f32 convert(%r)            ->      %c = f32 reduce_scatter(%w)      (float32)
//
//   %r = f32 reduce_scatter(%g)             %n = bf16 convert(%g)
//                                   ->      %s = bf16 reduce_scatter(%n)
//                                           %r = f32 convert(%s)             (bfloat16)
//
// Applies to reduce_scatter and all_reduce of a floating value named as a gradient (the
// autodiff's "<value>.grad"): the loss's and the norms' reductions keep their dtype. A
// widened operand that is a narrowing convert of a value already in the target dtype (an
// earlier pass's f32 sum rounded to bf16) reads that value; readers that widen the result
// to the target dtype read the new reduction directly. product_result_dtype then lets the
// product write the wide partial itself.
#pragma once

#include "kiln/ir/dtype.h"
#include "kiln/passes/pass.h"

namespace kiln::passes {

class GradReduceDtypePass : public Pass {
 public:
  explicit GradReduceDtypePass(ir::DType dtype) : dtype_(dtype) {}
  std::string_view name() const override { return "grad_reduce_dtype"; }
  Result<bool> run(ir::Module& module) override;

 private:
  ir::DType dtype_;
};

}  // namespace kiln::passes
