// Algebraic simplification and constant folding.
//
// Identities (a "0" or "1" is a constant whose elements all have that value, or a broadcast
// of one):
//   x+0, 0+x, x-0, x*1, 1*x, x/1 -> x          neg(neg(x)) -> x
//   x*0, 0*x -> 0 for integers only (for floats NaN*0 and inf*0 are NaN and -1*0 is -0)
//   convert to the operand's dtype, copy -> x  select(true, a, b) -> a, select(p, a, a) -> a
//   transpose(transpose(x)) -> one transpose, or x when the perms cancel; identity transpose -> x
//   reshape(reshape(x)) -> one reshape; reshape to the operand's shape -> x
//   broadcast(broadcast(x)) -> one broadcast; identity broadcast -> x
//   slice covering the whole operand, pad by nothing, concatenate of one operand,
//   reduce over no dims -> x            get_tuple_element(tuple(a, b), 1) -> b
//   scatter_add(0, idx, u) with one index per row (a one-hot: the gradient of picking one
//     element per row, as the loss picks each label's logit) -> select(iota == idx, u, 0),
//     which fuses into its readers instead of filling and scattering a whole array
// x+0 -> x is exact except that -0 + +0 is +0: like XLA, we accept the sign of a zero.
//
// Constant folding: an instruction whose operands are all constants is evaluated with its
// op's reference evaluation (ops::OpDef::eval) into a constant, when its result has at most
// `max_fold_elements` elements (default 1024) and no more elements than its operands
// together, so folding never makes a constant bigger than its inputs: broadcasts and pads of
// constants stay as they are (as XLA does), and huge values are never materialized. Sources
// (iota, rng) are not folded: generating them is cheaper than loading them. An elementwise
// instruction whose operands are all splats (a broadcast of a scalar constant, or a
// constant with equal elements) folds at any size to a broadcast of one scalar constant.
//
// A rule that would replace a value by another with a different sharding declines. Every
// decline is logged with its reason at KILN_VLOG(2), except the routine one for broadcasts
// of constants (folding would grow them), which logs at KILN_VLOG(3). Instructions made dead by
// a rewrite are removed; dead code that was there before is left to DcePass.
#pragma once

#include <cstdint>

#include "kiln/passes/pass.h"

namespace kiln::passes {

class SimplifyPass : public Pass {
 public:
  struct Options {
    int64_t max_fold_elements = 1024;
  };
  SimplifyPass() = default;
  explicit SimplifyPass(Options options) : options_(options) {}

  std::string_view name() const override { return "simplify"; }
  Result<bool> run(ir::Module& module) override;

 private:
  Options options_;
};

}  // namespace kiln::passes
