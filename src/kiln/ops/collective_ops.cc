// Collectives and the local shard of a replicated value, as the SPMD partitioner emits them
// into a per-device program. A collective's group is named by mesh axes (`mesh_axes`): the
// devices that differ from this one only along those axes (config::Mesh::group), ranked by shard index, so
// rank r holds chunk r of a dimension split over those axes. `group_size` (the product of
// the axes' sizes) is an attribute so that shapes follow from the IR text alone.
//
//   all_gather(x [.., n, ..]), dim, mesh_axes      -> [.., n*g, ..]  chunks concatenated by rank
//   reduce_scatter(x [.., n*g, ..]), dim, mesh_axes -> [.., n, ..]    sum over the group, chunk r
//   all_reduce(x), mesh_axes                       -> like x          sum over the group
//   shard_slice(x [.., n*g, ..]), dim, mesh_axes    -> [.., n, ..]    this device's chunk, no traffic
//
// The reference evaluation runs the collective through the thread's DeviceContext
// (ops/device_context.h) in double precision; on a one-device mesh every op is the
// identity. Sums are taken in rank order, so all members get identical bits.
#include <limits>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/ops/collectives.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using Ints = std::vector<int64_t>;

// [outer, n, inner] blocks around dimension `dim` of `dims`.
struct Blocks {
  int64_t outer = 1, n = 1, inner = 1;
};
Blocks blocks(const Ints& dims, int64_t dim) {
  Blocks b;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i < dim) b.outer *= dims[i];
    else if (i == dim) b.n = dims[i];
    else b.inner *= dims[i];
  }
  return b;
}

// A group is some of the mesh's devices: at least one, and not more than a mesh may have
// (which also keeps the gathered dimension from overflowing).
constexpr int64_t kMaxGroupSize = int64_t{1} << 24;

Status check_group_size(const InferContext& c, std::string_view op) {
  const int64_t g = c.attrs.get_int("group_size");
  if (g < 1 || g > kMaxGroupSize) return invalid_argument("{}: group_size={} is not in [1, {}]", op, g, kMaxGroupSize);
  return Status::ok_status();
}

Status check_dim(const InferContext& c, std::string_view op) {
  KILN_RETURN_IF_ERROR(internal::check_array(op, c.operands[0]));
  int64_t dim = c.attrs.get_int("dim");
  if (dim < 0 || dim >= c.operands[0].rank()) {
    return invalid_argument("{}: dim={} is not a dimension of {}", op, dim, c.operands[0].to_string());
  }
  return check_group_size(c, op);
}

Result<Shape> gather_rule(const InferContext& c) {
  KILN_RETURN_IF_ERROR(check_dim(c, "all_gather"));
  Ints dims = c.operands[0].dims();
  const int64_t d = c.attrs.get_int("dim"), g = c.attrs.get_int("group_size");
  if (dims[d] > std::numeric_limits<int64_t>::max() / g) return invalid_argument("all_gather: the gathered shape overflows");
  dims[d] *= g;
  return c.operands[0].with_dims(dims);
}

// reduce_scatter and shard_slice: the dimension splits into group_size equal chunks.
Result<Shape> split_rule(const InferContext& c, std::string_view op) {
  KILN_RETURN_IF_ERROR(check_dim(c, op));
  Ints dims = c.operands[0].dims();
  int64_t d = c.attrs.get_int("dim"), g = c.attrs.get_int("group_size");
  if (dims[d] % g != 0) {
    return invalid_argument("{}: dimension {} of {} does not split into {} equal chunks", op, d,
                            c.operands[0].to_string(), g);
  }
  dims[d] /= g;
  return c.operands[0].with_dims(dims);
}

Result<Shape> all_reduce_rule(const InferContext& c) {
  KILN_RETURN_IF_ERROR(internal::check_array("all_reduce", c.operands[0]));
  KILN_RETURN_IF_ERROR(check_group_size(c, "all_reduce"));
  return c.operands[0];
}

ir::Literal eval_all_gather(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  std::vector<int64_t> group = collective_group(instr).members;
  if (group.size() == 1) return ir::Literal(instr.shape(), x.values());
  size_t n = x.values().size();
  std::vector<double> gathered(n * group.size());
  wait_for(current_device().collectives->all_gather(group, x.values().data(), n * sizeof(double), gathered.data()),
              instr);
  // gathered is [rank][outer, n, inner]; the result is [outer, rank * n, inner].
  Blocks b = blocks(x.shape().dims(), instr.attrs().get_int("dim"));
  std::vector<double> out(gathered.size());
  int64_t g = static_cast<int64_t>(group.size());
  for (int64_t r = 0; r < g; ++r) {
    for (int64_t o = 0; o < b.outer; ++o) {
      const double* src = gathered.data() + r * n + o * b.n * b.inner;
      double* dst = out.data() + (o * g + r) * b.n * b.inner;
      std::copy(src, src + b.n * b.inner, dst);
    }
  }
  return ir::Literal(instr.shape(), std::move(out));
}

// Chunk r of `x` along `dim` ([outer, n/g, inner] of rank r), packed contiguously by rank.
std::vector<double> pack_chunks(const ir::Literal& x, int64_t dim, int64_t g) {
  Blocks b = blocks(x.shape().dims(), dim);
  int64_t chunk = b.n / g;
  std::vector<double> packed(x.values().size());
  double* dst = packed.data();
  for (int64_t r = 0; r < g; ++r) {
    for (int64_t o = 0; o < b.outer; ++o) {
      const double* src = x.values().data() + (o * b.n + r * chunk) * b.inner;
      dst = std::copy(src, src + chunk * b.inner, dst);
    }
  }
  return packed;
}

ir::Literal eval_reduce_scatter(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  std::vector<int64_t> group = collective_group(instr).members;
  if (group.size() == 1) return ir::Literal(instr.shape(), x.values());
  std::vector<double> packed = pack_chunks(x, instr.attrs().get_int("dim"), static_cast<int64_t>(group.size()));
  size_t count = packed.size() / group.size();
  std::vector<double> out(count);
  wait_for(current_device().collectives->reduce_scatter(group, packed.data(), out.data(), count,
                                                           ReduceDType::kF64),
              instr);
  return ir::Literal(instr.shape(), std::move(out));
}

ir::Literal eval_all_reduce(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  std::vector<int64_t> group = collective_group(instr).members;
  if (group.size() == 1) return ir::Literal(instr.shape(), x.values());
  std::vector<double> out(x.values().size());
  wait_for(current_device().collectives->all_reduce(group, x.values().data(), out.data(), out.size(),
                                                       ReduceDType::kF64),
              instr);
  return ir::Literal(instr.shape(), std::move(out));
}

ir::Literal eval_shard_slice(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  int64_t g = instr.attrs().get_int("group_size");
  int64_t r = collective_group(instr).rank;
  std::vector<double> packed = pack_chunks(x, instr.attrs().get_int("dim"), g);
  size_t count = packed.size() / g;
  return ir::Literal(instr.shape(), std::vector<double>(packed.begin() + r * count, packed.begin() + (r + 1) * count));
}

ir::Attrs same_group(const Instr& instr) {
  ir::Attrs a;
  a.set("mesh_axes", instr.attrs().get_string("mesh_axes"));
  a.set("group_size", instr.attrs().get_int("group_size"));
  if (instr.attrs().has("dim")) a.set("dim", instr.attrs().get_int("dim"));
  return a;
}

// Adjoints, with the SPMD convention that a replicated value's gradient is the sum of the
// per-device gradients: gather <-> reduce-scatter, all-reduce is self-adjoint, and the
// local slice of a replicated value gathers the slices' gradients.
std::vector<Instr*> vjp_all_gather(VjpContext& c) {
  return {c.b.emit(Opcode::kReduceScatter, {c.dout()}, same_group(*c.instr))};
}
std::vector<Instr*> vjp_to_gather(VjpContext& c) {
  return {c.b.emit(Opcode::kAllGather, {c.dout()}, same_group(*c.instr))};
}
std::vector<Instr*> vjp_all_reduce(VjpContext& c) {
  return {c.b.emit(Opcode::kAllReduce, {c.dout()}, same_group(*c.instr))};
}

Cost collective_cost(const Instr& instr) { return internal::memory_cost(instr); }

std::vector<std::vector<int>> dim_preserving_map(const Instr& instr) {
  // Every dimension stays in place (the split or gathered one changes size).
  return internal::identity_dim_map(instr);
}

OpExample example(std::string_view op, std::string_view x, std::string_view result, std::string_view attrs) {
  return OpExample{fmt::format("module @ex\n\nENTRY computation @main {{\n  %x = {} parameter(), index=0\n"
                               "  ROOT %r = {} {}(%x), {}\n}}\n",
                               x, result, op, attrs)};
}

}  // namespace

void register_collective_ops(OpTable& table) {
  const std::vector<AttrSpec> split_attrs = {{"dim", AttrKind::kInt}, {"mesh_axes", AttrKind::kString},
                                             {"group_size", AttrKind::kInt}};
  const std::vector<AttrSpec> group_attrs = {{"mesh_axes", AttrKind::kString}, {"group_size", AttrKind::kInt}};
  struct Spec {
    Opcode opcode;
    const std::vector<AttrSpec>& attrs;
    InferFn infer;
    EvalFn eval;
    VjpFn vjp;
    OpExample example;
  };
  const Spec specs[] = {
      {Opcode::kAllGather, split_attrs, gather_rule, eval_all_gather, vjp_all_gather,
       example("all_gather", "f32[2,3]", "f32[2,3]", "dim=1, mesh_axes=fsdp, group_size=1")},
      {Opcode::kReduceScatter, split_attrs, [](const InferContext& c) { return split_rule(c, "reduce_scatter"); },
       eval_reduce_scatter, vjp_to_gather,
       example("reduce_scatter", "f32[4,2]", "f32[4,2]", "dim=0, mesh_axes=data, group_size=1")},
      {Opcode::kAllReduce, group_attrs, all_reduce_rule, eval_all_reduce, vjp_all_reduce,
       example("all_reduce", "f32[3]", "f32[3]", "mesh_axes=\"fsdp,expert\", group_size=1")},
      {Opcode::kShardSlice, split_attrs, [](const InferContext& c) { return split_rule(c, "shard_slice"); },
       eval_shard_slice, vjp_to_gather,
       example("shard_slice", "f32[2,4]", "f32[2,4]", "dim=1, mesh_axes=tensor, group_size=1")},
  };
  for (const Spec& s : specs) {
    OpDef d;
    d.opcode = s.opcode;
    d.min_operands = d.max_operands = 1;
    d.device_dependent = true;
    d.attrs = s.attrs;
    d.infer = s.infer;
    d.eval = s.eval;
    d.vjp = s.vjp;
    d.dim_map = dim_preserving_map;
    d.cost = collective_cost;
    d.examples = {s.example};
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
