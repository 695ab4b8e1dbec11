// Elementwise ops: most are one StableHLO op of the same meaning. Where Kiln's reference
// evaluation defines a case StableHLO leaves to the platform (an integer divided by zero is 0
// in Kiln, -1 in XLA), the lowering spells Kiln's meaning out.
#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
namespace {

using ir::Opcode;

LowerFn same_op(std::string_view name) {
  return [name](LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) -> Result<Vals> {
    std::vector<Val> args;
    for (int i = 0; i < instr.num_operands(); ++i) args.push_back(array_operand(operands, i));
    return Vals{ctx.w.op(name, args, tensor_type(instr.shape()))};
  };
}

Result<Vals> identity(LowerContext&, const ir::Instr&, std::span<const Vals> operands) {
  return Vals{array_operand(operands, 0)};
}

// x / y, and for integers 0 where y == 0 (Kiln's meaning; XLA gives -1 there).
Result<Vals> divide(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const Val& x = array_operand(operands, 0);
  const Val& y = array_operand(operands, 1);
  const ir::Shape& shape = instr.shape();
  if (!ir::is_integral(shape.dtype())) return Vals{ctx.w.binary("stablehlo.divide", x, y)};
  Writer& w = ctx.w;
  const Val zero = w.splat(shape.dtype(), shape.dims(), 0), one = w.splat(shape.dtype(), shape.dims(), 1);
  const Val is_zero = w.compare(y, zero, "EQ");
  const Val safe = w.op("stablehlo.select", {is_zero, one, y}, y.type);
  const Val q = w.binary("stablehlo.divide", x, safe);
  return Vals{w.op("stablehlo.select", {is_zero, zero, q}, q.type)};
}

// max and min propagate NaN in Kiln; XLA:CPU's maximum/minimum may return the other operand
// when one is NaN, so a NaN operand is selected explicitly (integers have none).
LowerFn nan_propagating(std::string_view name) {
  return [name](LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) -> Result<Vals> {
    Writer& w = ctx.w;
    const Val& a = array_operand(operands, 0);
    const Val& b = array_operand(operands, 1);
    const Val m = w.binary(name, a, b);
    if (!ir::is_floating(instr.shape().dtype())) return Vals{m};
    const Val a_nan = w.compare(a, a, "NE"), b_nan = w.compare(b, b, "NE");
    const Val keep_a = w.op("stablehlo.select", {a_nan, a, m}, m.type);
    return Vals{w.op("stablehlo.select", {b_nan, b, keep_a}, m.type)};
  };
}

Result<Vals> compare(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  std::string direction = instr.attrs().get_string("direction");
  for (char& c : direction) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return Vals{ctx.w.compare(array_operand(operands, 0), array_operand(operands, 1), direction)};
}

// To pred: x != 0 (what Kiln's rounding to pred means); otherwise stablehlo.convert, whose
// float-to-integer conversion truncates toward zero as Kiln's does.
Result<Vals> convert(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const Val& x = array_operand(operands, 0);
  const ir::Shape& from = instr.operand(0)->shape();
  if (instr.shape().dtype() == ir::DType::kPred && from.dtype() != ir::DType::kPred) {
    return Vals{ctx.w.compare(x, ctx.w.splat(from.dtype(), from.dims(), 0), "NE")};
  }
  return Vals{ctx.w.convert(x, tensor_type(instr.shape()))};
}

// is_finite of an integer or pred is always true (StableHLO takes floats only).
Result<Vals> is_finite(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const ir::Shape& from = instr.operand(0)->shape();
  if (!ir::is_floating(from.dtype())) return Vals{ctx.w.splat(ir::DType::kPred, from.dims(), 1)};
  return Vals{ctx.w.op("stablehlo.is_finite", {array_operand(operands, 0)}, tensor_type(instr.shape()))};
}

}  // namespace

void register_elementwise_lowerings(LoweringTable& table) {
  const std::vector<std::pair<Opcode, std::string_view>> same = {
      {Opcode::kNeg, "stablehlo.negate"},      {Opcode::kAbs, "stablehlo.abs"},
      {Opcode::kExp, "stablehlo.exponential"}, {Opcode::kLog, "stablehlo.log"},
      {Opcode::kLog1p, "stablehlo.log_plus_one"}, {Opcode::kSqrt, "stablehlo.sqrt"},
      {Opcode::kRsqrt, "stablehlo.rsqrt"},     {Opcode::kTanh, "stablehlo.tanh"},
      {Opcode::kLogistic, "stablehlo.logistic"}, {Opcode::kSin, "stablehlo.sine"},
      {Opcode::kCos, "stablehlo.cosine"},      {Opcode::kFloor, "stablehlo.floor"},
      {Opcode::kNot, "stablehlo.not"},         {Opcode::kAdd, "stablehlo.add"},
      {Opcode::kSub, "stablehlo.subtract"},    {Opcode::kMul, "stablehlo.multiply"},
      {Opcode::kPow, "stablehlo.power"},       {Opcode::kAnd, "stablehlo.and"},
      {Opcode::kOr, "stablehlo.or"},           {Opcode::kSelect, "stablehlo.select"},
      {Opcode::kClamp, "stablehlo.clamp"},  // clamp(min, x, max): Kiln's operand order too
  };
  for (const auto& [opcode, name] : same) table.add(opcode, same_op(name));
  table.add(Opcode::kCopy, identity);  // values are immutable in StableHLO: a copy is the value
  table.add(Opcode::kStopGradient, identity);
  table.add(Opcode::kDiv, divide);
  table.add(Opcode::kMax, nan_propagating("stablehlo.maximum"));
  table.add(Opcode::kMin, nan_propagating("stablehlo.minimum"));
  table.add(Opcode::kCompare, compare);
  table.add(Opcode::kConvert, convert);
  table.add(Opcode::kIsFinite, is_finite);
}

}  // namespace kiln::backend::pjrt
