// Collectives of the per-device program (ops/collective_ops.cc, async_collective_ops.cc) as
// XLA's cross-replica collectives. The program runs in replica mode (one replica per mesh
// device, num_partitions = 1), so a collective names its groups with `replica_groups` and no
// `channel_handle`. Measured on xla-cpu-pjrt 0.0.1: all_reduce, all_gather and reduce_scatter
// ran the same with or without a channel_handle (and use_global_device_ids), but an
// all_to_all with one failed at run time (partition_id < partition_count) and a
// collective_permute with one aborted (spec/pjrt.md): without is the form every op accepts.
//
//   all_gather(x [.., n, ..])      -> stablehlo.all_gather     all_gather_dim = dim
//   reduce_scatter(x [.., n*g, ..]) -> stablehlo.reduce_scatter scatter_dimension = dim, sum
//   all_reduce(x)                  -> stablehlo.all_reduce     sum
//   shard_slice(x [.., n*g, ..])    -> stablehlo.dynamic_slice at rank * n, the rank read from
//                                     a device -> rank table at stablehlo.replica_id
//
// A group of one device is the identity. Sums of bf16 are taken in f32 and rounded once, as
// Kiln's own collectives do (its reference sums in double); pred "sums" are ORs (a sum of
// 0/1 rounded back to pred). An async start is its collective (XLA schedules its own
// overlap) and the done is the start's value.
#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/lower_collectives_common.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;
using ir::Opcode;

// The dtype a collective sums in.
DType sum_dtype(DType dtype) { return dtype == DType::kBF16 ? DType::kF32 : dtype; }

// The scalar combiner region of all_reduce and reduce_scatter.
std::string sum_region(Writer& w, DType dtype) {
  const std::string scalar = tensor_type(dtype, {});
  return w.region({scalar, scalar}, [dtype](Writer& r, std::span<const Val> args) {
    return std::vector<Val>{r.binary(dtype == DType::kPred ? "stablehlo.or" : "stablehlo.add", args[0], args[1])};
  });
}

Result<Vals> all_gather(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Val x = array_operand(operands, 0);
  KILN_ASSIGN_OR_RETURN(auto groups, replica_groups(instr, ctx.options.mesh));
  if (groups[0].size() == 1) return Vals{x};
  // The backward pass's re-gather of a weight (passes/regather.h) is the forward gather's
  // twin, and XLA's CSE would merge the two back: every layer's gathered weights would then
  // live from the forward pass to the backward one. An optimization barrier on its operand
  // keeps it a gather of its own, as jax.checkpoint's barriers do for MaxText: gpt-oss-120b
  // on 64 H100s (fsdp 64, one 2048-token sequence each) went from XLA's 224 GiB of
  // temporaries to 50.
  if (instr.meta().name.ends_with(".regather")) {
    x = ctx.w.op_multi("stablehlo.optimization_barrier", std::span<const Val>(&x, 1), {x.type})[0];
  }
  return Vals{ctx.w.op("stablehlo.all_gather", {x}, tensor_type(instr.shape()),
                       fmt::format("all_gather_dim = {} : i64, {}", instr.attrs().get_int("dim"),
                                   replica_groups_property(groups)))};
}

Result<Vals> reduce_scatter(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const Val& x = array_operand(operands, 0);
  KILN_ASSIGN_OR_RETURN(auto groups, replica_groups(instr, ctx.options.mesh));
  if (groups[0].size() == 1) return Vals{x};
  Writer& w = ctx.w;
  const ir::Shape& out = instr.shape();
  const DType sum = sum_dtype(out.dtype());
  const std::vector<std::string> regions = {sum_region(w, sum)};
  const Val summed = w.op("stablehlo.reduce_scatter", std::vector<Val>{w.convert(x, tensor_type(sum, instr.operand(0)->shape().dims()))},
                          tensor_type(sum, out.dims()),
                          fmt::format("scatter_dimension = {} : i64, {}", instr.attrs().get_int("dim"),
                                      replica_groups_property(groups)),
                          regions);
  return Vals{w.convert(summed, tensor_type(out))};
}

Result<Vals> all_reduce(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const Val& x = array_operand(operands, 0);
  KILN_ASSIGN_OR_RETURN(auto groups, replica_groups(instr, ctx.options.mesh));
  if (groups[0].size() == 1) return Vals{x};
  Writer& w = ctx.w;
  const ir::Shape& out = instr.shape();
  const DType sum = sum_dtype(out.dtype());
  const std::vector<std::string> regions = {sum_region(w, sum)};
  const Val wide = w.convert(x, tensor_type(sum, out.dims()));
  const Val summed = w.op("stablehlo.all_reduce", std::vector<Val>{wide}, wide.type, replica_groups_property(groups), regions);
  return Vals{w.convert(summed, tensor_type(out))};
}

//   shard_slice(x [.., n*g, ..]) -> [.., n, ..]: x[.., rank*n : (rank+1)*n, ..]
Result<Vals> shard_slice(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const Val& x = array_operand(operands, 0);
  KILN_ASSIGN_OR_RETURN(auto groups, replica_groups(instr, ctx.options.mesh));
  if (groups[0].size() == 1) return Vals{x};
  Writer& w = ctx.w;
  const ir::Shape& out = instr.shape();
  const int64_t dim = instr.attrs().get_int("dim");
  const std::vector<int64_t> ranks = group_ranks(instr, ctx.options.mesh);
  const Val table = w.i64_constant(ranks);
  const Val replica = w.op("stablehlo.replica_id", {}, "tensor<ui32>");
  const Val device = w.convert(replica, "tensor<i64>");
  const std::vector<int64_t> one = {1};
  const Val rank = w.reshape(w.op("stablehlo.dynamic_slice", {table, device}, "tensor<1xi64>", "slice_sizes = " + i64_array(one)),
                             "tensor<i64>");
  auto i64_scalar = [&](int64_t v) {
    return w.op("stablehlo.constant", {}, "tensor<i64>", fmt::format("value = dense<{}> : tensor<i64>", v));
  };
  const Val start = w.binary("stablehlo.multiply", rank, i64_scalar(out.dim(dim)));
  const Val zero = i64_scalar(0);
  std::vector<Val> args = {x};
  for (int64_t d = 0; d < out.rank(); ++d) args.push_back(d == dim ? start : zero);
  return Vals{w.op("stablehlo.dynamic_slice", args, tensor_type(out), "slice_sizes = " + i64_array(out.dims()))};
}

// The done of an async pair: the value its start made.
Result<Vals> async_done(LowerContext&, const ir::Instr&, std::span<const Vals> operands) {
  return Vals{array_operand(operands, 0)};
}

}  // namespace

void register_collective_lowerings(LoweringTable& table) {
  table.add(Opcode::kAllGather, all_gather);
  table.add(Opcode::kReduceScatter, reduce_scatter);
  table.add(Opcode::kAllReduce, all_reduce);
  table.add(Opcode::kShardSlice, shard_slice);
  table.add(Opcode::kRaggedAllToAll, lower_ragged_all_to_all);
  table.add(Opcode::kAllGatherStart, all_gather);
  table.add(Opcode::kReduceScatterStart, reduce_scatter);
  table.add(Opcode::kAllReduceStart, all_reduce);
  table.add(Opcode::kRaggedAllToAllStart, lower_ragged_all_to_all);
  for (Opcode done : {Opcode::kAllGatherDone, Opcode::kReduceScatterDone, Opcode::kAllReduceDone,
                      Opcode::kRaggedAllToAllDone}) {
    table.add(done, async_done);
  }
}

}  // namespace kiln::backend::pjrt
