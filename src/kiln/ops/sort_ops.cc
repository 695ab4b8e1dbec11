// Ordering along the last dimension. Both ops return a tuple (values, s32 indices into the
// last dimension):
//
//   sort(x), descending=0|1   stable: equal values keep their index order
//   topk(x), k=K              the K largest in descending order; ties -> lower index first
//
// NaN orders above every number (+inf included), as XLA's total order does: it sorts last
// ascending, first descending, and is picked first by topk. The gradient of either op sends
// the values' gradient back to the positions the indices name.
#include <algorithm>
#include <cmath>
#include <functional>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::check_array;

// a < b in the total order where NaN is the largest value (and all NaNs are equal).
bool value_less(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

Result<Shape> check_sortable(std::string_view op, const Shape& x) {
  KILN_RETURN_IF_ERROR(check_array(op, x));
  if (x.rank() == 0) return invalid_argument("{} works along the last dimension; it needs rank >= 1, got {}", op, x.to_string());
  if (x.dtype() == DType::kPred) return invalid_argument("{} needs a numeric operand, got {}", op, x.to_string());
  return x;
}

// ---- shape rules ----

Result<Shape> infer_sort(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape x, check_sortable("sort", ctx.operands[0]));
  int64_t descending = ctx.attrs.get_int_or("descending", 0);
  if (descending != 0 && descending != 1) return invalid_argument("sort descending={} must be 0 or 1", descending);
  return Shape::tuple({x, x.with_dtype(DType::kS32)});
}

Result<Shape> infer_topk(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape x, check_sortable("topk", ctx.operands[0]));
  int64_t k = ctx.attrs.get_int("k");
  int64_t n = x.dims().back();
  if (k < 1 || k > n) {
    return invalid_argument("topk k={} must be in [1, {}] (the last dimension of {})", k, n, x.to_string());
  }
  std::vector<int64_t> dims = x.dims();
  dims.back() = k;
  Shape values(x.dtype(), dims);
  return Shape::tuple({values, values.with_dtype(DType::kS32)});
}

// ---- reference evaluation ----

// For each row along the last dim, order_row(row, n, order) fills `order` with the row's
// indices in result order; the first out_n of them make the result row.
ir::Literal eval_rows(const Instr& instr, const ir::Literal& x, int64_t out_n,
                      const std::function<void(const double*, int64_t, std::vector<int64_t>&)>& order_row) {
  int64_t n = x.shape().dims().back();
  int64_t rows = n == 0 ? 0 : x.shape().num_elements() / n;
  const Shape& vshape = instr.shape().element(0);
  std::vector<double> values(vshape.num_elements()), indices(vshape.num_elements());
  std::vector<int64_t> order;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.values().data() + r * n;
    order_row(row, n, order);
    for (int64_t j = 0; j < out_n; ++j) {
      values[r * out_n + j] = row[order[j]];
      indices[r * out_n + j] = static_cast<double>(order[j]);
    }
  }
  return ir::Literal::tuple({ir::Literal(vshape, std::move(values)),
                             ir::Literal(instr.shape().element(1), std::move(indices))});
}

ir::Literal eval_sort(const Instr& instr, std::span<const ir::Literal* const> args) {
  bool descending = instr.attrs().get_int_or("descending", 0) != 0;
  const ir::Literal& x = *args[0];
  return eval_rows(instr, x, x.shape().dims().back(), [&](const double* row, int64_t n, std::vector<int64_t>& order) {
    order = internal::iota_vector(n);
    if (descending) {
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return value_less(row[b], row[a]); });
    } else {
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return value_less(row[a], row[b]); });
    }
  });
}

ir::Literal eval_topk(const Instr& instr, std::span<const ir::Literal* const> args) {
  int64_t k = instr.attrs().get_int("k");
  return eval_rows(instr, *args[0], k, [&](const double* row, int64_t n, std::vector<int64_t>& order) {
    order = internal::iota_vector(n);
    // Larger first; ties by lower index, which makes the order total (partial_sort is not stable).
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      if (value_less(row[b], row[a])) return true;
      if (value_less(row[a], row[b])) return false;
      return a < b;
    });
  });
}

// ---- gradient rule (both ops) ----

// x gets dvalues added back where the indices point along the last dim (every leading dim
// is a batch dim of the scatter).
std::vector<Instr*> vjp_ordering(VjpContext& c) {
  Instr* x = c.operand(0);
  if (!ir::is_floating(x->shape().dtype())) return {nullptr};
  int64_t last = x->shape().rank() - 1;
  Instr* indices = c.b.get_tuple_element(c.instr, 1);
  return {c.b.scatter_add(c.b.zeros_like(x), indices, c.dout(0), last, last)};
}

// ---- sharding rules and cost ----

std::vector<std::vector<int>> sort_dim_map(const Instr& instr) {
  return internal::identity_dim_map(instr);
}

std::vector<std::vector<int>> topk_dim_map(const Instr& instr) {
  std::vector<std::vector<int>> m = internal::identity_dim_map(instr);
  m[0].back() = -1;  // the last dim shrinks to k: a shard of it is not a shard of the result
  return m;
}

// Comparisons: n log2 n per row for sort, n log2 k for topk (one flop each).
Cost ordering_cost(const Instr& instr, int64_t kept) {
  Cost c = internal::memory_cost(instr);
  const Shape& x = instr.operand(0)->shape();
  int64_t n = x.dims().back();
  double rows = n == 0 ? 0.0 : static_cast<double>(x.num_elements() / n);
  c.flops = rows * static_cast<double>(n) * std::max(1.0, std::log2(static_cast<double>(std::max<int64_t>(kept, 2))));
  return c;
}

// ---- examples ----

std::string ordering_example(const std::string& x, const std::string& result, const std::string& values,
                             const std::string& op_and_attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  %t = {} {}\n"
      "  ROOT %v = {} get_tuple_element(%t), index=0\n}}\n",
      x, result, op_and_attrs, values);
}

std::string ordering_tuple_example(const std::string& x, const std::string& result, const std::string& op_and_attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %x = {} parameter(), index=0\n"
      "  ROOT %t = {} {}\n}}\n",
      x, result, op_and_attrs);
}

std::vector<OpExample> sort_examples() {
  return {
      {ordering_example("f32[3,4]", "(f32[3,4], s32[3,4])", "f32[3,4]", "sort(%x), descending=0")},
      {ordering_example("f32[2,5]", "(f32[2,5], s32[2,5])", "f32[2,5]", "sort(%x), descending=1")},
      {ordering_example("f32[2,2,3]", "(f32[2,2,3], s32[2,2,3])", "f32[2,2,3]", "sort(%x), descending=0")},
      {ordering_tuple_example("f32[6]", "(f32[6], s32[6])", "sort(%x), descending=1")},
  };
}

std::vector<OpExample> topk_examples() {
  return {
      // router-like: top 2 of 5 experts for 3 tokens
      {ordering_example("f32[3,5]", "(f32[3,2], s32[3,2])", "f32[3,2]", "topk(%x), k=2")},
      {ordering_example("f32[2,2,4]", "(f32[2,2,3], s32[2,2,3])", "f32[2,2,3]", "topk(%x), k=3")},
      {ordering_example("f32[4]", "(f32[4], s32[4])", "f32[4]", "topk(%x), k=4")},
      {ordering_tuple_example("f32[2,6]", "(f32[2,1], s32[2,1])", "topk(%x), k=1")},
  };
}

// Rows along the last dimension are ordered on their own: with a leading dimension (the
// MoE's token shards, the router's batch) each device orders its own rows. A rank-1 operand
// is one row: its only dimension is the ordered one. Both results (values, indices) carry
// the rows.
std::vector<bool> ordered_rows(const Instr& instr) {
  if (instr.operand(0)->shape().rank() < 2) return {};
  return std::vector<bool>(instr.shape().elements().size(), true);
}

}  // namespace

void register_sort_ops(OpTable& table) {
  {
    OpDef d;
    d.opcode = Opcode::kSort;
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"descending", AttrKind::kInt, false, {}}};
    d.infer = infer_sort;
    d.eval = eval_sort;
    d.grad = GradKind::kRule;
    d.vjp = vjp_ordering;
    d.dim_map = sort_dim_map;
    d.batch_rows = ordered_rows;
    d.cost = [](const Instr& i) { return ordering_cost(i, i.operand(0)->shape().dims().back()); };
    d.examples = sort_examples();
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kTopK;
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"k", AttrKind::kInt, true, {}}};
    d.infer = infer_topk;
    d.eval = eval_topk;
    d.grad = GradKind::kRule;
    d.vjp = vjp_ordering;
    d.dim_map = topk_dim_map;
    d.batch_rows = ordered_rows;
    d.cost = [](const Instr& i) { return ordering_cost(i, i.attrs().get_int("k")); };
    d.examples = topk_examples();
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
