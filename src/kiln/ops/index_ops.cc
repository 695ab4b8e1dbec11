// Indexing: gather along one axis (tf.gather with batch_dims) and its adjoint scatter_add.
//
//   gather(x, idx), axis=a, batch_dims=bd
//     result dims = x.dims[:a] + idx.dims[bd:] + x.dims[a+1:]; out-of-range indices clamp
//   scatter_add(x, idx, updates), axis=a, batch_dims=bd
//     updates shaped like the gather result; adds them into x where gather would read;
//     out-of-range indices are skipped
//
// The first bd dims of x and idx are shared batch dims (embedding lookup: a=0, bd=0;
// take_along_axis over the last of two dims: a=1, bd=1). Evaluation views x as
// [B, P, N, Q] (batch, dims before the axis, the axis, dims after) and idx as [B, I].
#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::check_array;
using internal::same_size_dims;

// ---- shape rule (shared) ----

// The gather result of x and idx, or a message naming what is wrong.
Result<Shape> gather_result(std::string_view op, const Shape& x, const Shape& idx, const ir::Attrs& attrs) {
  KILN_RETURN_IF_ERROR(check_array(op, x));
  KILN_RETURN_IF_ERROR(check_array(op, idx));
  if (idx.dtype() != DType::kS32 && idx.dtype() != DType::kU32) {
    return invalid_argument("{} indices must be s32 or u32, got {}", op, idx.to_string());
  }
  int64_t axis = attrs.get_int("axis");
  int64_t bd = attrs.get_int_or("batch_dims", 0);
  if (bd < 0 || bd > idx.rank()) {
    return invalid_argument("{} batch_dims={} must be in [0, {}] (the rank of indices {})", op, bd, idx.rank(),
                            idx.to_string());
  }
  if (axis < bd || axis >= x.rank()) {
    return invalid_argument("{} axis={} must be in [batch_dims={}, {}) (the rank of operand {})", op, axis, bd, x.rank(),
                            x.to_string());
  }
  for (int i = 0; i < bd; ++i) {
    if (x.dim(i) != idx.dim(i)) {
      return invalid_argument("{} batch dim {} differs: operand {} has {} but indices {} have {}", op, i, x.to_string(),
                              x.dim(i), idx.to_string(), idx.dim(i));
    }
  }
  std::vector<int64_t> dims(x.dims().begin(), x.dims().begin() + axis);
  dims.insert(dims.end(), idx.dims().begin() + bd, idx.dims().end());
  dims.insert(dims.end(), x.dims().begin() + axis + 1, x.dims().end());
  return Shape(x.dtype(), std::move(dims));
}

Result<Shape> infer_gather(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape out, gather_result("gather", ctx.operands[0], ctx.operands[1], ctx.attrs));
  const Shape& x = ctx.operands[0];
  int64_t axis = ctx.attrs.get_int("axis");
  if (x.dim(static_cast<int>(axis)) == 0 && out.num_elements() > 0) {
    return invalid_argument("gather from the empty axis {} of {}: there is nothing to read", axis, x.to_string());
  }
  return out;
}

Result<Shape> infer_scatter_add(const InferContext& ctx) {
  const Shape& x = ctx.operands[0];
  KILN_ASSIGN_OR_RETURN(Shape expected, gather_result("scatter_add", x, ctx.operands[1], ctx.attrs));
  const Shape& updates = ctx.operands[2];
  KILN_RETURN_IF_ERROR(check_array("scatter_add", updates));
  if (x.dtype() == DType::kPred) return invalid_argument("scatter_add needs a numeric operand, got {}", x.to_string());
  if (updates != expected) {
    return invalid_argument("scatter_add updates must be {} (shaped like gather of operand {} by indices {}), got {}",
                            expected.to_string(), x.to_string(), ctx.operands[1].to_string(), updates.to_string());
  }
  return x;
}

// ---- reference evaluation ----

// x viewed as [B, P, N, Q], idx as [B, I].
struct IndexView {
  int64_t B = 1, P = 1, N = 1, Q = 1, I = 1;
};

IndexView index_view(const Shape& x, const Shape& idx, const ir::Attrs& attrs) {
  int axis = static_cast<int>(attrs.get_int("axis"));
  int bd = static_cast<int>(attrs.get_int_or("batch_dims", 0));
  IndexView v;
  for (int i = 0; i < bd; ++i) v.B *= x.dim(i);
  for (int i = bd; i < axis; ++i) v.P *= x.dim(i);
  v.N = x.dim(axis);
  for (int i = axis + 1; i < x.rank(); ++i) v.Q *= x.dim(i);
  for (int i = bd; i < idx.rank(); ++i) v.I *= idx.dim(i);
  return v;
}

ir::Literal eval_gather(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const ir::Literal& idx = *args[1];
  IndexView v = index_view(x.shape(), idx.shape(), instr.attrs());
  std::vector<double> out(instr.shape().num_elements());
  if (out.empty()) return ir::Literal(instr.shape(), std::move(out));  // (the rule allows N = 0 only here)
  const double* xs = x.values().data();
  double* o = out.data();
  for (int64_t b = 0; b < v.B; ++b) {
    for (int64_t p = 0; p < v.P; ++p) {
      for (int64_t i = 0; i < v.I; ++i) {
        int64_t j = std::clamp(static_cast<int64_t>(idx.at(b * v.I + i)), int64_t{0}, v.N - 1);
        const double* row = xs + ((b * v.P + p) * v.N + j) * v.Q;
        o = std::copy(row, row + v.Q, o);
      }
    }
  }
  return ir::Literal(instr.shape(), std::move(out));
}

ir::Literal eval_scatter_add(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const ir::Literal& idx = *args[1];
  const ir::Literal& updates = *args[2];
  IndexView v = index_view(x.shape(), idx.shape(), instr.attrs());
  std::vector<double> out = x.values();  // accumulate in double, round once at the end
  const double* u = updates.values().data();
  for (int64_t b = 0; b < v.B; ++b) {
    for (int64_t p = 0; p < v.P; ++p) {
      for (int64_t i = 0; i < v.I; ++i, u += v.Q) {
        double j = idx.at(b * v.I + i);
        if (j < 0 || j >= static_cast<double>(v.N)) continue;  // out of range: skipped
        double* row = out.data() + ((b * v.P + p) * v.N + static_cast<int64_t>(j)) * v.Q;
        for (int64_t q = 0; q < v.Q; ++q) row[q] += u[q];
      }
    }
  }
  return ir::Literal(instr.shape(), std::move(out));
}

// ---- gradient rules ----

int64_t axis_of(const Instr& instr) { return instr.attrs().get_int("axis"); }
int64_t batch_dims_of(const Instr& instr) { return instr.attrs().get_int_or("batch_dims", 0); }

// x gets g added back where it was read: scatter_add at the clamped indices (scatter_add
// skips out-of-range indices, but gather read the clamped position for them).
std::vector<Instr*> vjp_gather(VjpContext& c) {
  Instr* x = c.operand(0);
  if (!ir::is_floating(x->shape().dtype())) return {nullptr, nullptr};
  Instr* idx = c.operand(1);
  int64_t axis = axis_of(*c.instr);
  int64_t n = x->shape().dim(static_cast<int>(axis));
  Instr* clamped = c.b.clamp(c.b.zeros_like(idx), idx, c.b.full(idx->shape(), static_cast<double>(std::max<int64_t>(n - 1, 0))));
  Instr* dx = c.b.scatter_add(c.b.zeros_like(x), clamped, c.dout(), axis, batch_dims_of(*c.instr));
  return {dx, nullptr};
}

// x passes g through; updates read g where they were added, and get 0 where their index
// was out of range (they were skipped, so they had no effect).
std::vector<Instr*> vjp_scatter_add(VjpContext& c) {
  Instr* x = c.operand(0);
  if (!ir::is_floating(x->shape().dtype())) return {nullptr, nullptr, nullptr};
  Instr* idx = c.operand(1);
  Instr* updates = c.operand(2);
  int64_t axis = axis_of(*c.instr), bd = batch_dims_of(*c.instr);
  Instr* g = c.dout();
  Instr* gathered = c.b.gather(g, idx, axis, bd);
  int64_t n = x->shape().dim(static_cast<int>(axis));
  Instr* in_range = c.b.compare(idx, c.b.full(idx->shape(), static_cast<double>(n)), "lt");
  if (idx->shape().dtype() == DType::kS32) {
    Instr* non_negative = c.b.compare(idx, c.b.zeros_like(idx), "ge");
    in_range = c.b.binary(Opcode::kAnd, non_negative, in_range);
  }
  // idx dim i < bd is updates dim i; idx dim i >= bd is updates dim axis + (i - bd).
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < idx->shape().rank(); ++i) dims.push_back(i < bd ? i : axis + (i - bd));
  Instr* mask = c.b.broadcast(in_range, updates->shape().dims(), dims);
  Instr* dupdates = c.b.select(mask, gathered, c.b.zeros_like(gathered));
  return {g, nullptr, dupdates};
}

// ---- sharding rules and cost ----

std::vector<std::vector<int>> gather_dim_map(const Instr& instr) {
  const Shape& x = instr.operand(0)->shape();
  const Shape& idx = instr.operand(1)->shape();
  int axis = static_cast<int>(axis_of(instr));
  int bd = static_cast<int>(batch_dims_of(instr));
  int ni = idx.rank() - bd;  // index dims that replace the axis
  std::vector<int> xm(x.rank()), im(idx.rank());
  for (int i = 0; i < x.rank(); ++i) xm[i] = i < axis ? i : i == axis ? -1 : i + ni - 1;
  for (int i = 0; i < idx.rank(); ++i) im[i] = i < bd ? i : axis + (i - bd);
  return {xm, im};
}

std::vector<std::vector<int>> scatter_add_dim_map(const Instr& instr) {
  const Shape& x = instr.operand(0)->shape();
  const Shape& idx = instr.operand(1)->shape();
  const Shape& updates = instr.operand(2)->shape();
  int axis = static_cast<int>(axis_of(instr));
  int bd = static_cast<int>(batch_dims_of(instr));
  int ni = idx.rank() - bd;
  std::vector<int> xm(x.rank()), im(idx.rank()), um(updates.rank());
  // The scattered-into axis is addressed by global indices: it never maps.
  for (int i = 0; i < x.rank(); ++i) xm[i] = i == axis ? -1 : i;
  for (int i = 0; i < idx.rank(); ++i) im[i] = i < bd ? i : -1;
  for (int i = 0; i < updates.rank(); ++i) um[i] = i < axis ? i : i < axis + ni ? -1 : i - ni + 1;
  return {xm, im, um};
}

// gather reads only the rows it gathers, not the whole operand (an embedding table).
Cost gather_cost(const Instr& instr) {
  Cost c;
  double out = static_cast<double>(instr.shape().byte_size());
  c.bytes_read = out + static_cast<double>(instr.operand(1)->shape().byte_size());
  c.bytes_written = out;
  return c;
}

Cost scatter_add_cost(const Instr& instr) {
  Cost c = internal::memory_cost(instr);
  c.flops = static_cast<double>(instr.operand(2)->shape().num_elements());
  return c;
}

// ---- examples ----

std::string gather_example(const std::string& x, const std::string& idx, const std::string& out, const std::string& attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  %i = {} parameter(), index=1\n"
      "  ROOT %g = {} gather(%x, %i), {}\n}}\n",
      x, idx, out, attrs);
}

std::string scatter_example(const std::string& x, const std::string& idx, const std::string& updates,
                            const std::string& attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {0} parameter(), index=0\n"
      "  %i = {1} parameter(), index=1\n"
      "  %u = {2} parameter(), index=2\n"
      "  ROOT %s = {0} scatter_add(%x, %i, %u), {3}\n}}\n",
      x, idx, updates, attrs);
}

const std::pair<double, double> kFloats = {-2.0, 2.0};

std::vector<OpExample> gather_examples() {
  return {
      // embedding lookup: table [vocab=5, embed=3], tokens [2,3]
      {gather_example("f32[5,3]", "s32[2,3]", "f32[2,3,3]", "axis=0, batch_dims=0"), {kFloats, {0, 5}}},
      // take_along_axis: x [T=4, E=5], idx [T, k=2]
      {gather_example("f32[4,5]", "s32[4,2]", "f32[4,2]", "axis=1, batch_dims=1"), {kFloats, {0, 5}}},
      // a middle axis with dims on both sides, u32 indices
      {gather_example("f32[2,4,3]", "u32[3]", "f32[2,3,3]", "axis=1, batch_dims=0"), {kFloats, {0, 4}}},
      // batch dim with a non-batch dim before the axis: x [2,3,4], idx [2,2] -> [2,3,2]
      {gather_example("f32[2,3,4]", "s32[2,2]", "f32[2,3,2]", "axis=2, batch_dims=1"), {kFloats, {0, 4}}},
      // some indices out of range: they clamp to [0, 3]
      {gather_example("f32[4,2]", "s32[6]", "f32[6,2]", "axis=0"), {kFloats, {-3, 7}}},
  };
}

std::vector<OpExample> scatter_add_examples() {
  return {
      // embedding gradient: duplicate tokens accumulate
      {scatter_example("f32[5,3]", "s32[6]", "f32[6,3]", "axis=0, batch_dims=0"), {kFloats, {0, 5}, kFloats}},
      // take_along_axis adjoint
      {scatter_example("f32[3,4]", "s32[3,2]", "f32[3,2]", "axis=1, batch_dims=1"), {kFloats, {0, 4}, kFloats}},
      // a middle axis, u32 indices
      {scatter_example("f32[2,4,3]", "u32[2,2]", "f32[2,2,2,3]", "axis=1, batch_dims=0"), {kFloats, {0, 4}, kFloats}},
      // some indices out of range: those updates are skipped
      {scatter_example("f32[4,2]", "s32[6]", "f32[6,2]", "axis=0"), {kFloats, {-3, 7}, kFloats}},
  };
}

}  // namespace

void register_index_ops(OpTable& table) {
  {
    OpDef d;
    d.opcode = Opcode::kGather;
    d.min_operands = d.max_operands = 2;
    d.attrs = {{"axis", AttrKind::kInt, true, {}}, {"batch_dims", AttrKind::kInt, false, {}}};
    d.infer = infer_gather;
    d.eval = eval_gather;
    d.grad = GradKind::kRule;
    d.vjp = vjp_gather;
    d.dim_map = gather_dim_map;
    d.split_map = same_size_dims(gather_dim_map);
    d.cost = gather_cost;
    d.examples = gather_examples();
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kScatterAdd;
    d.min_operands = d.max_operands = 3;
    d.attrs = {{"axis", AttrKind::kInt, true, {}}, {"batch_dims", AttrKind::kInt, false, {}}};
    d.infer = infer_scatter_add;
    d.eval = eval_scatter_add;
    d.grad = GradKind::kRule;
    d.vjp = vjp_scatter_add;
    d.dim_map = scatter_add_dim_map;
    // Splits follow the batch dims and the dims after the axis (a take's gradient).
    d.split_map = same_size_dims(scatter_add_dim_map);
    d.cost = scatter_add_cost;
    d.examples = scatter_add_examples();
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
