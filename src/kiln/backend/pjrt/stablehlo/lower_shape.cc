// Shape and data-movement ops: each is the one StableHLO op of the same meaning. Kiln's
// attribute conventions are XLA's here (broadcast dims, transpose perm, slice bounds, pad
// edges, concatenate dim), and dynamic_slice / dynamic_update_slice clamp their starts into
// range exactly as StableHLO does (clamp(start, 0, dim - size)), so nothing is spelled out.
#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
namespace {

using Ints = std::vector<int64_t>;

// x [..] -> result: x's dim i lands on result dim dims[i] (same size, or a size-1 expanded).
Result<Vals> broadcast(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  return Vals{ctx.w.broadcast(array_operand(operands, 0), tensor_type(instr.shape()), instr.attrs().get_ints("dims"))};
}

Result<Vals> reshape(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  return Vals{ctx.w.reshape(array_operand(operands, 0), tensor_type(instr.shape()))};
}

// Result dim i = operand dim perm[i], StableHLO's `permutation` too.
Result<Vals> transpose(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  return Vals{ctx.w.op("stablehlo.transpose", {array_operand(operands, 0)}, tensor_type(instr.shape()),
                       "permutation = " + i64_array(instr.attrs().get_ints("perm")))};
}

// [start, limit) with strides; both round the last partial stride up.
Result<Vals> slice(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const int rank = instr.operand(0)->shape().rank();
  const ir::Attrs& a = instr.attrs();
  return Vals{ctx.w.op("stablehlo.slice", {array_operand(operands, 0)}, tensor_type(instr.shape()),
                       fmt::format("start_indices = {}, limit_indices = {}, strides = {}", i64_array(a.get_ints("start")),
                                   i64_array(a.get_ints("limit")), i64_array(a.get_ints_or("strides", Ints(rank, 1)))))};
}

// pad(x, value): low/high edges and interior gaps (all non-negative in Kiln).
Result<Vals> pad(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const int rank = instr.operand(0)->shape().rank();
  const ir::Attrs& a = instr.attrs();
  return Vals{ctx.w.op("stablehlo.pad", {array_operand(operands, 0), array_operand(operands, 1)},
                       tensor_type(instr.shape()),
                       fmt::format("edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
                                   i64_array(a.get_ints("low")), i64_array(a.get_ints("high")),
                                   i64_array(a.get_ints_or("interior", Ints(rank, 0)))))};
}

Result<Vals> concatenate(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  std::vector<Val> xs;
  for (int i = 0; i < instr.num_operands(); ++i) xs.push_back(array_operand(operands, i));
  return Vals{ctx.w.op("stablehlo.concatenate", xs, tensor_type(instr.shape()),
                       fmt::format("dimension = {} : i64", instr.attrs().get_int("dim")))};
}

// dynamic_slice(x, s0, s1, ...): s32[] starts, clamped by StableHLO as by Kiln.
Result<Vals> dynamic_slice(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  std::vector<Val> args;
  for (int i = 0; i < instr.num_operands(); ++i) args.push_back(array_operand(operands, i));
  return Vals{ctx.w.op("stablehlo.dynamic_slice", args, tensor_type(instr.shape()),
                       "slice_sizes = " + i64_array(instr.attrs().get_ints("sizes")))};
}

// dynamic_update_slice(x, update, s0, ...): the same operand order as StableHLO's.
Result<Vals> dynamic_update_slice(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  std::vector<Val> args;
  for (int i = 0; i < instr.num_operands(); ++i) args.push_back(array_operand(operands, i));
  return Vals{ctx.w.op("stablehlo.dynamic_update_slice", args, tensor_type(instr.shape()))};
}

}  // namespace

void register_shape_lowerings(LoweringTable& table) {
  using ir::Opcode;
  table.add(Opcode::kBroadcast, broadcast);
  table.add(Opcode::kReshape, reshape);
  table.add(Opcode::kTranspose, transpose);
  table.add(Opcode::kSlice, slice);
  table.add(Opcode::kPad, pad);
  table.add(Opcode::kConcatenate, concatenate);
  table.add(Opcode::kDynamicSlice, dynamic_slice);
  table.add(Opcode::kDynamicUpdateSlice, dynamic_update_slice);
}

}  // namespace kiln::backend::pjrt
