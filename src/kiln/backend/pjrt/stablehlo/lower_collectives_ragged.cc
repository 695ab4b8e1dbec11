// ragged_all_to_all (ops/ragged_all_to_all_op.cc) as ordinary collectives: XLA:CPU rejects
// the `ragged_all_to_all` custom call (spec/pjrt.md), and padded blocks say the same thing.
// Every member sends every destination a block of `slot` rows (the slot the rows land in:
// its capacity), the rows it sends first and zeros after, with one stablehlo.all_to_all;
// then the rows need no count exchange:
//
//   dispatch (reverse=0): x [P, rows, F], sizes s32 [P, G] -> [P, G*slot, F]
//     send[l, d, r] = r < count[l, d] ? x[l, begin[l, d] + r] : 0     (gather + select)
//     recv = all_to_all(send) over dim 1: recv[l, s] = member s's send[l, me]
//     out = recv as [P, G*slot, F]: member s's block in slot s, zeros past its rows
//   return (reverse=1): x [P, G*slot, F], sizes s32 [P, G] (this member's dispatch sizes)
//     recv = all_to_all(x as [P, G, slot, F]): recv[l, d] = member d's slot of me
//     out[l, row] = recv[l, d, row - begin[l, d]] for the block d holding row, if
//                   row - begin[l, d] < count[l, d], else 0                 (gather + select)
//
// begin/count are ragged_all_to_all.h's plan (count cut at `slot`). The global form (no
// mesh_axes: groups of G consecutive entries of this device) and a group of one device
// exchange within the device: the all_to_all becomes a transpose inside each group of
// entries. Bytes moved: G*slot rows per entry instead of the sent ones; exact (only gathers,
// selects and copies touch the values).
#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/lower_collectives_common.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;
using Ints = std::vector<int64_t>;

// "stablehlo.gather" of whole trailing slices: operand [a_0, .., a_k-1, F], indices
// [batch.., k] (index_vector_dim last) -> [batch.., F].
Val gather_rows(Writer& w, const Val& operand, const Ints& operand_dims, const Val& indices, const Ints& batch,
                DType dtype) {
  const int64_t k = static_cast<int64_t>(operand_dims.size()) - 1;
  Ints collapsed, slice(operand_dims.size(), 1);
  for (int64_t i = 0; i < k; ++i) collapsed.push_back(i);
  slice.back() = operand_dims.back();
  Ints out = batch;
  out.push_back(operand_dims.back());
  const Ints offset = {static_cast<int64_t>(batch.size())};
  return w.op("stablehlo.gather", {operand, indices}, tensor_type(dtype, out),
              fmt::format("dimension_numbers = #stablehlo.gather<offset_dims = {}, collapsed_slice_dims = {}, "
                          "start_index_map = {}, index_vector_dim = {}>, indices_are_sorted = false, slice_sizes = {}",
                          dim_list(offset), dim_list(collapsed), dim_list(collapsed), batch.size(), i64_array(slice)));
}

// Index tensors [batch..] (s32) stacked into [batch.., n] for gather_rows.
Val stack_indices(Writer& w, const std::vector<Val>& parts, const Ints& batch) {
  Ints one = batch;
  one.push_back(1);
  std::vector<Val> columns;
  for (const Val& p : parts) columns.push_back(w.reshape(p, tensor_type(DType::kS32, one)));
  Ints all = batch;
  all.push_back(static_cast<int64_t>(parts.size()));
  return w.op("stablehlo.concatenate", columns, tensor_type(DType::kS32, all),
              fmt::format("dimension = {} : i64", batch.size()));
}

// [P, G, slot, F] blocks by destination -> the same by source: across the group's devices
// (all_to_all) or, for a group inside this device, a transpose within groups of G entries.
Result<Val> exchange(LowerContext& ctx, const ir::Instr& instr, const Val& blocks, const Ints& dims, DType dtype) {
  Writer& w = ctx.w;
  const int64_t P = dims[0], G = dims[1];
  if (instr.attrs().has("mesh_axes")) {
    KILN_ASSIGN_OR_RETURN(auto groups, replica_groups(instr, ctx.options.mesh));
    if (groups[0].size() > 1) {
      return w.op("stablehlo.all_to_all", {blocks}, blocks.type,
                  fmt::format("split_dimension = 1 : i64, concat_dimension = 1 : i64, split_count = {} : i64, {}", G,
                              replica_groups_property(groups)));
    }
  }
  if (G == 1) return blocks;
  const Ints grouped = {P / G, G, G, dims[2], dims[3]};
  const Val t = transpose(w, w.reshape(blocks, tensor_type(dtype, grouped)), dtype, grouped, Ints{0, 2, 1, 3, 4});
  return w.reshape(t, blocks.type);
}

}  // namespace

Result<Vals> lower_ragged_all_to_all(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const ir::Shape& xs = instr.operand(0)->shape();
  const ir::Shape& out = instr.shape();
  const DType dtype = out.dtype();
  const int64_t P = xs.dim(0), G = instr.attrs().get_int("group_size");
  const int64_t rows = instr.attrs().get_int("rows"), slot = instr.attrs().get_int("slot");
  const bool reverse = instr.attrs().get_int("reverse") != 0;
  int64_t F = 1;
  for (int d = 2; d < xs.rank(); ++d) F *= xs.dim(d);
  if (instr.attrs().has("mesh_axes")) {  // the group must match the mesh even when nothing moves
    KILN_RETURN_IF_ERROR(replica_groups(instr, ctx.options.mesh).status());
  }
  // Nothing to send, or nowhere to put it: all zeros (every device takes this branch alike).
  if (P == 0 || F == 0 || rows == 0 || slot == 0) return Vals{w.splat(dtype, out.dims(), 0)};

  const Val& x = array_operand(operands, 0);
  const Val& sizes = array_operand(operands, 1);
  const Ints size_dims = {P, G};
  KILN_ASSIGN_OR_RETURN(RaggedBounds bounds, ragged_bounds(w, sizes, size_dims, rows));
  const Val count = w.binary("stablehlo.minimum", w.binary("stablehlo.subtract", bounds.end, bounds.begin),
                             w.splat(DType::kS32, size_dims, static_cast<double>(slot)));
  const Ints blocks = {P, G, slot, F};
  const std::string blocks_type = tensor_type(dtype, blocks);

  if (!reverse) {
    // send[l, d, r] = x[l, begin + r] where r < count, else 0.
    const Val x3 = w.reshape(x, tensor_type(dtype, Ints{P, rows, F}));
    const Ints idx_dims = {P, G, slot};
    const std::string idx_type = tensor_type(DType::kS32, idx_dims);
    const Ints lead = {0, 1};
    const Val r = iota(w, DType::kS32, idx_dims, 2);
    const Val valid = w.compare(r, w.broadcast(count, idx_type, lead), "LT");
    const Val at = select(w, valid, w.binary("stablehlo.add", w.broadcast(bounds.begin, idx_type, lead), r),
                          w.splat(DType::kS32, idx_dims, 0));
    const Val indices = stack_indices(w, {iota(w, DType::kS32, idx_dims, 0), at}, idx_dims);
    const Val rows_sent = gather_rows(w, x3, Ints{P, rows, F}, indices, idx_dims, dtype);
    const Ints three = {0, 1, 2};
    const Val send = select(w, w.broadcast(valid, tensor_type(DType::kPred, blocks), three), rows_sent,
                            w.splat(dtype, blocks, 0));
    KILN_ASSIGN_OR_RETURN(Val recv, exchange(ctx, instr, send, blocks, dtype));
    return Vals{w.reshape(recv, tensor_type(out))};
  }

  // Return: recv[l, d] holds member d's slot of this member; row `row` of block d is at
  // recv[l, d, row - begin[l, d]].
  KILN_ASSIGN_OR_RETURN(Val recv, exchange(ctx, instr, w.reshape(x, blocks_type), blocks, dtype));
  const Ints per_row = {P, rows, G};
  const std::string per_row_type = tensor_type(DType::kS32, per_row);
  const Ints row_dims = {P, rows};
  const std::string row_type = tensor_type(DType::kS32, row_dims);
  const Ints entry_and_block = {0, 2};
  const Ints last = {2};
  // d = the number of blocks that end at or before `row` (blocks are consecutive).
  const Val ended = w.compare(w.broadcast(bounds.end, per_row_type, entry_and_block), iota(w, DType::kS32, per_row, 1), "LE");
  const Val d = w.reduce(w.convert(ended, per_row_type), w.scalar(DType::kS32, 0), last, "stablehlo.add", row_type);
  // begin and count of block d (0 and 0 past the last block, which makes the row invalid).
  const Ints entry_and_row = {0, 1};
  const Val is_d = w.compare(iota(w, DType::kS32, per_row, 2), w.broadcast(d, per_row_type, entry_and_row), "EQ");
  auto pick = [&](const Val& per_block) {
    const Val kept = select(w, is_d, w.broadcast(per_block, per_row_type, entry_and_block), w.splat(DType::kS32, per_row, 0));
    return w.reduce(kept, w.scalar(DType::kS32, 0), last, "stablehlo.add", row_type);
  };
  const Val r = w.binary("stablehlo.subtract", iota(w, DType::kS32, row_dims, 1), pick(bounds.begin));
  const Val valid = w.compare(r, pick(count), "LT");
  const Val zeros = w.splat(DType::kS32, row_dims, 0);
  const Val block = w.binary("stablehlo.minimum", d, w.splat(DType::kS32, row_dims, static_cast<double>(G - 1)));
  const Val indices = stack_indices(w, {iota(w, DType::kS32, row_dims, 0), block, select(w, valid, r, zeros)}, row_dims);
  const Val got = gather_rows(w, recv, blocks, indices, row_dims, dtype);
  const Ints rows_f = {P, rows, F};
  const Val result = select(w, w.broadcast(valid, tensor_type(DType::kPred, rows_f), entry_and_row), got,
                            w.splat(dtype, rows_f, 0));
  return Vals{w.reshape(result, tensor_type(out))};
}

}  // namespace kiln::backend::pjrt
