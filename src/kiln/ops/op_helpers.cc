#include "kiln/ops/op_helpers.h"

#include <set>

namespace kiln::ops::internal {

Status check_dims(std::string_view op, std::string_view what, const std::vector<int64_t>& dims, int rank) {
  std::set<int64_t> seen;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) return invalid_argument("{} {} has dimension {} outside [0, {})", op, what, d, rank);
    if (!seen.insert(d).second) return invalid_argument("{} {} repeats dimension {}", op, what, d);
  }
  return ok_status();
}

Status check_array(std::string_view op, const ir::Shape& shape) {
  if (shape.is_tuple()) return invalid_argument("{} operand must be an array, got {}", op, shape.to_string());
  return ok_status();
}

Result<ir::Shape> require_declared(const InferContext& ctx, std::string_view op) {
  if (!ctx.declared) return invalid_argument("{} needs its result shape written out", op);
  return *ctx.declared;
}

Result<ir::Shape> declared_float_result(const InferContext& ctx, ir::Shape out, std::string_view op) {
  if (!ctx.declared || ctx.declared->is_tuple() || ctx.declared->dims() != out.dims() ||
      ctx.declared->dtype() == out.dtype()) {
    return out;
  }
  if (!ir::is_floating(out.dtype()) || !ir::is_floating(ctx.declared->dtype())) {
    return invalid_argument("{} of {} operands cannot produce {}: only a floating result dtype may differ "
                            "from floating operands",
                            op, ir::dtype_name(out.dtype()), ctx.declared->to_string());
  }
  return *ctx.declared;
}

Cost memory_cost(const ir::Instr& instr) {
  Cost c;
  for (const ir::Instr* o : instr.operands()) c.bytes_read += static_cast<double>(o->shape().byte_size());
  c.bytes_written = static_cast<double>(instr.shape().byte_size());
  return c;
}

Cost elementwise_cost(const ir::Instr& instr, double flops_per_element, double transcendentals_per_element) {
  Cost c = memory_cost(instr);
  double n = static_cast<double>(instr.shape().num_elements());
  c.flops = n * flops_per_element;
  c.transcendentals = n * transcendentals_per_element;
  return c;
}

Cost zero_cost(const ir::Instr&) { return Cost{}; }

std::vector<std::vector<int>> identity_dim_map(const ir::Instr& instr) {
  std::vector<std::vector<int>> out;
  for (const ir::Instr* o : instr.operands()) {
    std::vector<int> m(o->shape().is_tuple() ? 0 : o->shape().rank());
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<int>(i);
    out.push_back(std::move(m));
  }
  return out;
}

DimMapFn same_size_dims(DimMapFn dim_map) {
  return [dim_map = std::move(dim_map)](const ir::Instr& instr) {
    std::vector<std::vector<int>> m = dim_map(instr);
    for (size_t i = 0; i < m.size() && i < instr.operands().size(); ++i) {
      const ir::Shape& s = instr.operand(static_cast<int>(i))->shape();
      for (size_t d = 0; d < m[i].size(); ++d) {
        const int r = m[i][d];
        if (r >= 0 && (r >= instr.shape().rank() || s.dim(static_cast<int>(d)) != instr.shape().dim(r))) m[i][d] = -1;
      }
    }
    return m;
  };
}

std::vector<std::vector<int>> empty_dim_map(const ir::Instr& instr) {
  std::vector<std::vector<int>> out;
  for (const ir::Instr* o : instr.operands()) out.emplace_back(o->shape().is_tuple() ? 0 : o->shape().rank(), -1);
  return out;
}

Instr* unbroadcast(Builder& b, Instr* g, const ir::Shape& operand_shape, const std::vector<int64_t>& dims) {
  // Sum over result dims that are new, and over dims the operand had as size 1 but the
  // result expanded; then reshape to the operand's exact shape.
  std::vector<int64_t> reduce_dims;
  std::vector<bool> mapped(g->shape().rank(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    mapped[dims[i]] = true;
    if (operand_shape.dim(static_cast<int>(i)) != g->shape().dim(static_cast<int>(dims[i]))) reduce_dims.push_back(dims[i]);
  }
  for (int d = 0; d < g->shape().rank(); ++d) {
    if (!mapped[d]) reduce_dims.push_back(d);
  }
  std::sort(reduce_dims.begin(), reduce_dims.end());
  Instr* summed = reduce_dims.empty() ? g : b.reduce_sum(g, reduce_dims);
  if (summed->shape().dims() != operand_shape.dims()) summed = b.reshape(summed, operand_shape.dims());
  return summed;
}

}  // namespace kiln::ops::internal
