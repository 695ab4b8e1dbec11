// Reductions: one stablehlo.reduce each, with an add / maximum / minimum body.
//
// Kiln's reference accumulates in double and rounds once to the result dtype. A bf16 sum
// rounded at every step would drift far outside bf16's tolerance over a long row, so bf16
// sums accumulate in f32 (convert, reduce, convert back); f32 sums stay f32 (XLA's own
// reduction order, within f32 tolerance), and max / min are exact in any dtype.
// Kiln's reduce_max / reduce_min propagate NaN. StableHLO's maximum / minimum should too, but
// XLA:CPU's do not reliably (measured on xla-cpu-pjrt 0.0.1: min(y, x) with x NaN gives y,
// and a max / min reduce drops NaN), so a floating body spells it out: a NaN operand wins.
// An empty reduction gives the init: -inf / +inf, or the lowest / highest integer (what
// Kiln's rounding of +-inf to an integer dtype gives).
#include <limits>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;

// The identity of max (sign -1) or min (sign +1) in `dtype`.
double extremum_init(DType dtype, int sign) {
  switch (dtype) {
    case DType::kS32:
      return sign < 0 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max();
    case DType::kU32:
      return sign < 0 ? 0.0 : static_cast<double>(std::numeric_limits<uint32_t>::max());
    default:
      return sign * std::numeric_limits<double>::infinity();
  }
}

// combiner(a, b), or for floats with `nan_wins` a NaN operand itself when there is one.
Val combine(Writer& w, std::string_view combiner, const Val& a, const Val& b, bool nan_wins) {
  const Val c = w.binary(combiner, a, b);
  if (!nan_wins) return c;
  const Val a_or_c = w.op("stablehlo.select", {w.compare(a, a, "NE"), a, c}, c.type);
  return w.op("stablehlo.select", {w.compare(b, b, "NE"), b, a_or_c}, c.type);
}

// x [..] reduced over dims -> result [kept dims], accumulated in `acc` and rounded to the
// result's dtype once.
Vals reduce_in(LowerContext& ctx, const ir::Instr& instr, const Val& x, std::string_view combiner, DType acc,
               double init, bool nan_wins = false) {
  const std::vector<int64_t>& dims = instr.attrs().get_ints("dims");
  if (dims.empty()) return {x};  // nothing reduced: the operand itself
  Writer& w = ctx.w;
  const ir::Shape& in = instr.operand(0)->shape();
  const Val xa = w.convert(x, tensor_type(acc, in.dims()));
  const std::string scalar = tensor_type(acc, {});
  const bool spell_nan = nan_wins && ir::is_floating(acc);
  const std::vector<std::string> regions = {w.region({scalar, scalar}, [&](Writer& rw, std::span<const Val> args) {
    return std::vector<Val>{combine(rw, combiner, args[0], args[1], spell_nan)};
  })};
  const Val r = w.op("stablehlo.reduce", std::vector<Val>{xa, w.scalar(acc, init)}, tensor_type(acc, instr.shape().dims()),
                     "dimensions = " + i64_array(dims), regions);
  return {w.convert(r, tensor_type(instr.shape()))};
}

Result<Vals> reduce_sum(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const DType dtype = instr.shape().dtype();
  const DType acc = dtype == DType::kBF16 ? DType::kF32 : dtype;
  return reduce_in(ctx, instr, array_operand(operands, 0), "stablehlo.add", acc, 0.0);
}

Result<Vals> reduce_max(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const DType dtype = instr.shape().dtype();
  return reduce_in(ctx, instr, array_operand(operands, 0), "stablehlo.maximum", dtype, extremum_init(dtype, -1),
                    /*nan_wins=*/true);
}

Result<Vals> reduce_min(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const DType dtype = instr.shape().dtype();
  return reduce_in(ctx, instr, array_operand(operands, 0), "stablehlo.minimum", dtype, extremum_init(dtype, +1),
                    /*nan_wins=*/true);
}

}  // namespace

void register_reduce_lowerings(LoweringTable& table) {
  table.add(ir::Opcode::kReduceSum, reduce_sum);
  table.add(ir::Opcode::kReduceMax, reduce_max);
  table.add(ir::Opcode::kReduceMin, reduce_min);
}

}  // namespace kiln::backend::pjrt
