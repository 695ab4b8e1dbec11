// gather and scatter_add along one axis (tf.gather with batch_dims) as stablehlo.gather and
// stablehlo.scatter with an add body.
//
//   x [B.., P.., N, Q..], idx [B.., I..]  (B: the batch_dims shared dims, N: the axis)
//   gather -> [B.., P.., I.., Q..];  scatter_add(x, idx, updates [B.., P.., I.., Q..]) -> x
//
// One index per point (index_vector_dim = idx's rank, an implicit trailing 1) picks a
// 1-wide slice along the axis, which is collapsed; the B dims are batching dims of both
// operands; P and Q are window (offset) dims, whole.
//
// Out-of-range indices: Kiln's gather clamps them to [0, N-1], which is what StableHLO's
// gather does to a start index; Kiln's scatter_add skips them, which is what XLA does with an
// update window outside the operand. u32 indices are brought to s32 first keeping that
// meaning (min(idx, N-1) for gather, min(idx, N) -- still outside -- for scatter), since a
// u32 above 2^31 would turn negative.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;
using Ints = std::vector<int64_t>;

std::string dims_list(const Ints& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

Ints iota(int64_t from, int64_t to) {
  Ints out;
  for (int64_t i = from; i < to; ++i) out.push_back(i);
  return out;
}

// The dimension numbers both ops share, read off x, idx and the attributes.
struct AxisDims {
  int64_t axis, bd;
  Ints window;  // result (updates) dims that are x's whole dims: P and Q
  Ints batch;   // [0, bd): batching dims of x and of idx
  int64_t index_vector_dim;
};

AxisDims axis_dims(const ir::Instr& instr) {
  const ir::Shape& x = instr.operand(0)->shape();
  const ir::Shape& idx = instr.operand(1)->shape();
  AxisDims d;
  d.axis = instr.attrs().get_int("axis");
  d.bd = instr.attrs().get_int_or("batch_dims", 0);
  const int64_t ni = idx.rank() - d.bd;
  d.window = iota(d.bd, d.axis);
  for (int64_t j : iota(d.axis + ni, x.rank() - 1 + ni)) d.window.push_back(j);
  d.batch = iota(0, d.bd);
  d.index_vector_dim = idx.rank();
  return d;
}

// "name = [..]" parts of a dimension-numbers attribute, the empty lists left out (MLIR's printing).
void add_dims(std::vector<std::string>& parts, std::string_view name, const Ints& dims) {
  if (!dims.empty()) parts.push_back(fmt::format("{} = {}", name, dims_list(dims)));
}

// idx as s32, with u32 values capped at `cap` first (they keep their in- or out-of-range meaning).
Val s32_indices(Writer& w, const ir::Shape& idx, const Val& v, int64_t cap) {
  if (idx.dtype() == DType::kS32) return v;
  const Val capped = w.binary("stablehlo.minimum", v, w.splat(DType::kU32, idx.dims(), static_cast<double>(cap)));
  return w.convert(capped, tensor_type(DType::kS32, idx.dims()));
}

Result<Vals> gather(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const ir::Shape& x = instr.operand(0)->shape();
  const ir::Shape& idx = instr.operand(1)->shape();
  // Nothing to read (Kiln allows an empty axis only then; a 1-wide slice of it is invalid).
  if (instr.shape().num_elements() == 0) return Vals{w.splat(x.dtype(), instr.shape().dims(), 0)};
  const AxisDims d = axis_dims(instr);
  const int64_t n = x.dim(static_cast<int>(d.axis));
  const Val indices = s32_indices(w, idx, array_operand(operands, 1), n - 1);
  std::vector<std::string> parts;
  add_dims(parts, "offset_dims", d.window);
  add_dims(parts, "collapsed_slice_dims", {d.axis});
  add_dims(parts, "operand_batching_dims", d.batch);
  add_dims(parts, "start_indices_batching_dims", d.batch);
  add_dims(parts, "start_index_map", {d.axis});
  parts.push_back(fmt::format("index_vector_dim = {}", d.index_vector_dim));
  Ints slice_sizes = x.dims();
  for (int64_t b : d.batch) slice_sizes[b] = 1;
  slice_sizes[d.axis] = 1;
  return Vals{w.op("stablehlo.gather", {array_operand(operands, 0), indices}, tensor_type(instr.shape()),
                   fmt::format("dimension_numbers = #stablehlo.gather<{}>, indices_are_sorted = false, slice_sizes = {}",
                               fmt::join(parts, ", "), i64_array(slice_sizes)))};
}

// Adds in f32 for bf16 (Kiln adds in double and rounds once; duplicate indices would round at
// every add in bf16), then rounds back.
Result<Vals> scatter_add(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const ir::Shape& x = instr.operand(0)->shape();
  const ir::Shape& idx = instr.operand(1)->shape();
  const ir::Shape& updates = instr.operand(2)->shape();
  if (updates.num_elements() == 0 || x.num_elements() == 0) return Vals{array_operand(operands, 0)};
  const AxisDims d = axis_dims(instr);
  const int64_t n = x.dim(static_cast<int>(d.axis));
  const DType acc = x.dtype() == DType::kBF16 ? DType::kF32 : x.dtype();
  const Val xa = w.convert(array_operand(operands, 0), tensor_type(acc, x.dims()));
  const Val ua = w.convert(array_operand(operands, 2), tensor_type(acc, updates.dims()));
  const Val indices = s32_indices(w, idx, array_operand(operands, 1), n);
  std::vector<std::string> parts;
  add_dims(parts, "update_window_dims", d.window);
  add_dims(parts, "inserted_window_dims", {d.axis});
  add_dims(parts, "input_batching_dims", d.batch);
  add_dims(parts, "scatter_indices_batching_dims", d.batch);
  add_dims(parts, "scatter_dims_to_operand_dims", {d.axis});
  parts.push_back(fmt::format("index_vector_dim = {}", d.index_vector_dim));
  const std::string scalar = tensor_type(acc, {});
  const std::vector<std::string> regions = {w.region({scalar, scalar}, [](Writer& rw, std::span<const Val> args) {
    return std::vector<Val>{rw.binary("stablehlo.add", args[0], args[1])};
  })};
  const Val sum = w.op("stablehlo.scatter", std::vector<Val>{xa, indices, ua}, xa.type,
                       fmt::format("indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<{}>, "
                                   "unique_indices = false",
                                   fmt::join(parts, ", ")),
                       regions);
  return Vals{w.convert(sum, tensor_type(instr.shape()))};
}

}  // namespace

void register_index_lowerings(LoweringTable& table) {
  table.add(ir::Opcode::kGather, gather);
  table.add(ir::Opcode::kScatterAdd, scatter_add);
}

}  // namespace kiln::backend::pjrt
