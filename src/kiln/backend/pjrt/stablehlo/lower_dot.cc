// dot_general: one stablehlo.dot_general. Kiln's dimension lists are StableHLO's
// dot_dimension_numbers, and both order the result as [batch (lhs order), lhs free, rhs free].
//
// Precision: Kiln's reference accumulates in double and rounds once to the declared result
// dtype. The product is computed in the accumulation dtype `acc` (f32 for bf16 and f32
// operands, f64 for f64 operands or an f64 result) and converted once to the result dtype:
//   bf16 x bf16 -> acc=f32 is StableHLO's mixed-precision form (bf16 operands, f32 result:
//     JAX's preferred_element_type), which GPUs and TPUs run on their bf16 units with f32
//     accumulation; the products of bf16 values are exact in f32. XLA:CPU cannot run it
//     (EmitOptions::mixed_precision_dot), so there the operands widen to f32 first.
//   f32 operands carry precision HIGHEST, or XLA may round them to bf16 (TPU) or tf32 (GPU).
//   integer operands: the product in the operand dtype (wrapping, as XLA's integer dots do).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;

std::string dims_list(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

// #stablehlo.dot<...> with the empty lists left out (how MLIR prints them).
std::string dot_dimension_numbers(const ir::Attrs& a) {
  std::vector<std::string> parts;
  auto add = [&](std::string_view name, const std::vector<int64_t>& dims) {
    if (!dims.empty()) parts.push_back(fmt::format("{} = {}", name, dims_list(dims)));
  };
  add("lhs_batching_dimensions", a.get_ints("lhs_batch"));
  add("rhs_batching_dimensions", a.get_ints("rhs_batch"));
  add("lhs_contracting_dimensions", a.get_ints("lhs_contract"));
  add("rhs_contracting_dimensions", a.get_ints("rhs_contract"));
  return fmt::format("dot_dimension_numbers = #stablehlo.dot<{}>", fmt::join(parts, ", "));
}

// lhs [batch.., lhs free.., contract..] x rhs [batch.., contract.., rhs free..] (in any dim
// order) -> result [batch.., lhs free.., rhs free..].
Result<Vals> dot_general(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const DType in = instr.operand(0)->shape().dtype();
  const DType out = instr.shape().dtype();
  DType acc = in;
  if (ir::is_floating(in)) acc = in == DType::kF64 || out == DType::kF64 ? DType::kF64 : DType::kF32;
  Val lhs = array_operand(operands, 0), rhs = array_operand(operands, 1);
  // bf16 operands into an f32 product stay bf16 (the mixed form) where the plugin runs it;
  // any other widening converts.
  const bool mixed = in == DType::kBF16 && acc == DType::kF32 && ctx.options.mixed_precision_dot;
  if (!mixed) {
    lhs = w.convert(lhs, tensor_type(acc, instr.operand(0)->shape().dims()));
    rhs = w.convert(rhs, tensor_type(acc, instr.operand(1)->shape().dims()));
  }
  std::string properties = dot_dimension_numbers(instr.attrs());
  if (ir::is_floating(in)) {
    const std::string_view precision = mixed ? "DEFAULT" : "HIGHEST";
    properties += fmt::format(", precision_config = [#stablehlo<precision {0}>, #stablehlo<precision {0}>]", precision);
  }
  const Val product = w.op("stablehlo.dot_general", {lhs, rhs}, tensor_type(acc, instr.shape().dims()), properties);
  return Vals{w.convert(product, tensor_type(instr.shape()))};
}

}  // namespace

void register_dot_lowerings(LoweringTable& table) { table.add(ir::Opcode::kDotGeneral, dot_general); }

}  // namespace kiln::backend::pjrt
