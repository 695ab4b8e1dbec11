// Shape and data-movement ops: broadcast, reshape, transpose, slice, pad, concatenate,
// dynamic_slice and dynamic_update_slice. None of them computes: every result element is a
// copy of one operand element (or of pad's value), so reference evaluation is index
// arithmetic and every gradient rule is the adjoint data movement applied to the output
// gradient (slice <-> pad, dynamic_slice <-> dynamic_update_slice, broadcast <-> reduce_sum).
#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::check_array;
using internal::flat_index;
using internal::for_each_index;
using internal::memory_cost;
using internal::same_size_dims;
using ir::dims_to_string;
using ir::row_major_strides;
using DimMap = std::vector<std::vector<int>>;
using Ints = std::vector<int64_t>;

// ---- shared checks ----

// The declared result of broadcast and reshape: an array of the operand's element type.
Result<Shape> declared_like_operand(const InferContext& ctx, std::string_view op) {
  const Shape& x = ctx.operands[0];
  KILN_RETURN_IF_ERROR(check_array(op, x));
  KILN_ASSIGN_OR_RETURN(Shape out, internal::require_declared(ctx, op));
  if (out.is_tuple() || out.dtype() != x.dtype()) {
    return invalid_argument("{} keeps the element type: {} cannot become {}", op, x.to_string(), out.to_string());
  }
  return out;
}

// An integer-list attribute with one entry per dimension of `x`.
Status check_per_dim(std::string_view op, std::string_view name, const Ints& v, const Shape& x) {
  if (static_cast<int>(v.size()) != x.rank()) {
    return invalid_argument("{} {}={} needs one entry per dimension of the operand {} ({} entries)", op, name,
                            dims_to_string(v), x.to_string(), x.rank());
  }
  return ok_status();
}

Status check_non_negative(std::string_view op, std::string_view name, const Ints& v) {
  for (int64_t e : v) {
    if (e < 0) return invalid_argument("{} {}={} must not be negative", op, name, dims_to_string(v));
  }
  return ok_status();
}

// dynamic_slice / dynamic_update_slice: one s32[] start index per dimension of x.
Status check_starts(std::string_view op, std::span<const Shape> starts, const Shape& x) {
  if (static_cast<int>(starts.size()) != x.rank()) {
    return invalid_argument("{} needs one s32[] start index per dimension of {} ({}), got {}", op, x.to_string(),
                            x.rank(), starts.size());
  }
  for (size_t k = 0; k < starts.size(); ++k) {
    const Shape& s = starts[k];
    if (s.is_tuple() || s.rank() != 0 || s.dtype() != DType::kS32) {
      return invalid_argument("{} start index {} must be s32[], got {}", op, k, s.to_string());
    }
  }
  return ok_status();
}

// Start indices clamped like XLA, so the window [start, start + size) lies inside x.
Ints clamped_starts(std::span<const ir::Literal* const> starts, const Ints& dims, const Ints& sizes) {
  Ints out(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    auto s = static_cast<int64_t>(starts[i]->scalar_value());
    out[i] = std::clamp<int64_t>(s, 0, dims[i] - sizes[i]);
  }
  return out;
}

// Operand dimension i maps to result dimension i where `keep(i)`, else -1.
template <typename Keep>
std::vector<int> same_dims_where(int rank, Keep keep) {
  std::vector<int> m(rank, -1);
  for (int i = 0; i < rank; ++i) {
    if (keep(i)) m[i] = i;
  }
  return m;
}

bool all_equal(const Ints& v, int64_t value) {
  return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == value; });
}

// ---- broadcast: operand dim i becomes result dim dims[i] (same size, or 1 expanded) ----

Result<Shape> broadcast_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape out, declared_like_operand(ctx, "broadcast"));
  const Shape& x = ctx.operands[0];
  const Ints& dims = ctx.attrs.get_ints("dims");
  if (static_cast<int>(dims.size()) != x.rank()) {
    return invalid_argument("broadcast dims={} must name one result dimension per operand dimension ({} for {})",
                            dims_to_string(dims), x.rank(), x.to_string());
  }
  for (int i = 0; i < x.rank(); ++i) {
    int64_t d = dims[i];
    if (d < 0 || d >= out.rank()) {
      return invalid_argument("broadcast dims={} has dimension {} outside the result rank {} of {}", dims_to_string(dims),
                              d, out.rank(), out.to_string());
    }
    if (i > 0 && d <= dims[i - 1]) {
      return invalid_argument("broadcast dims={} must be strictly increasing", dims_to_string(dims));
    }
    if (x.dim(i) != out.dim(static_cast<int>(d)) && x.dim(i) != 1) {
      return invalid_argument(
          "broadcast operand dimension {} has size {} but result dimension {} has size {} (sizes must be equal, or "
          "the operand's 1): {} -> {}",
          i, x.dim(i), d, out.dim(static_cast<int>(d)), x.to_string(), out.to_string());
    }
  }
  return out;
}

ir::Literal eval_broadcast(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const Ints& dims = instr.attrs().get_ints("dims");
  const Ints& xdims = x.shape().dims();
  Ints xstrides = row_major_strides(xdims);
  Ints xi(xdims.size());
  std::vector<double> out;
  out.reserve(instr.shape().num_elements());
  for_each_index(instr.shape().dims(), [&](const Ints& r) {
    for (size_t i = 0; i < dims.size(); ++i) xi[i] = xdims[i] == 1 ? 0 : r[dims[i]];
    out.push_back(x.at(flat_index(xi, xstrides)));
  });
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_broadcast(VjpContext& c) {
  return {internal::unbroadcast(c.b, c.dout(), c.operand(0)->shape(), c.instr->attrs().get_ints("dims"))};
}

DimMap broadcast_dim_map(const Instr& instr) {
  // An expanded size-1 dimension has no counterpart: the result repeats it.
  const Shape& x = instr.operand(0)->shape();
  const Ints& dims = instr.attrs().get_ints("dims");
  std::vector<int> m(x.rank(), -1);
  for (int i = 0; i < x.rank(); ++i) {
    if (x.dim(i) == instr.shape().dim(static_cast<int>(dims[i]))) m[i] = static_cast<int>(dims[i]);
  }
  return {m};
}

// ---- reshape: same elements in row-major order, new dims ----

Result<Shape> reshape_rule(const InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Shape out, declared_like_operand(ctx, "reshape"));
  const Shape& x = ctx.operands[0];
  if (out.num_elements() != x.num_elements()) {
    return invalid_argument("reshape keeps the element count: {} has {} elements, {} has {}", x.to_string(),
                            x.num_elements(), out.to_string(), out.num_elements());
  }
  return out;
}

ir::Literal eval_reshape(const Instr& instr, std::span<const ir::Literal* const> args) {
  return ir::Literal(instr.shape(), args[0]->values());
}

std::vector<Instr*> vjp_reshape(VjpContext& c) { return {c.b.reshape(c.dout(), c.operand(0)->shape().dims())}; }

DimMap reshape_dim_map(const Instr& instr) {
  // Cut both dim lists (size-1 dims aside) into the smallest consecutive groups with equal
  // element counts; a group of exactly one operand dim and one result dim is the same dim
  // ([6,4] -> [2,3,4]: dim 1 -> dim 2; dim 0 splits, so it maps nowhere).
  const Ints& in = instr.operand(0)->shape().dims();
  const Ints& out = instr.shape().dims();
  std::vector<int> m(in.size(), -1);
  if (instr.shape().num_elements() == 0) return {m};
  auto skip_ones = [](const Ints& d, size_t& k) {
    while (k < d.size() && d[k] == 1) ++k;
  };
  size_t i = 0, j = 0;
  while (true) {
    skip_ones(in, i);
    skip_ones(out, j);
    if (i == in.size() || j == out.size()) break;
    size_t i0 = i, j0 = j;
    int64_t a = in[i++], b = out[j++];
    while (a != b) {  // equal totals guarantee the shorter side has dims left
      if (a < b) {
        a *= in[i++];
      } else {
        b *= out[j++];
      }
    }
    if (i - i0 == 1 && j - j0 == 1) m[i0] = static_cast<int>(j0);
  }
  return {m};
}

// The dims a block split may follow (OpDef::split_map): the dims split into consecutive
// groups with equal element counts; a group's outermost operand dim and outermost result dim
// share their split when the group's other operand dims are not split (checked by the
// partitioner) — [B, T, D] -> [B*T, D] keeps a split batch.
DimMap reshape_split_map(const Instr& instr) {
  const Ints& in = instr.operand(0)->shape().dims();
  const Ints& out = instr.shape().dims();
  std::vector<int> m(in.size(), -1);
  size_t i = 0, j = 0;
  while (i < in.size() && j < out.size()) {
    size_t i0 = i, j0 = j;
    int64_t a = in[i++], b = out[j++];
    while (a != b) {
      if (a < b && i < in.size()) a *= in[i++];
      else if (b < a && j < out.size()) b *= out[j++];
      else break;
    }
    if (a != b) break;
    // Skip leading size-1 dims on both sides so the outermost real dims pair up.
    while (i0 + 1 < i && in[i0] == 1) ++i0;
    while (j0 + 1 < j && out[j0] == 1) ++j0;
    if (in[i0] != 1 && out[j0] != 1) m[i0] = static_cast<int>(j0);
  }
  return {m};
}

// ---- transpose: result dim i = operand dim perm[i] ----

Result<Shape> transpose_rule(const InferContext& ctx) {
  const Shape& x = ctx.operands[0];
  KILN_RETURN_IF_ERROR(check_array("transpose", x));
  const Ints& perm = ctx.attrs.get_ints("perm");
  Status s = static_cast<int>(perm.size()) == x.rank() ? internal::check_dims("transpose", "perm", perm, x.rank())
                                                        : invalid_argument("transpose perm has {} entries", perm.size());
  if (!s.ok()) {
    return invalid_argument("{}; perm={} must be a permutation of 0..{} for {}", s.message(), dims_to_string(perm),
                            x.rank() - 1, x.to_string());
  }
  Ints dims(x.rank());
  for (int i = 0; i < x.rank(); ++i) dims[i] = x.dim(static_cast<int>(perm[i]));
  return x.with_dims(std::move(dims));
}

ir::Literal eval_transpose(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const Ints& perm = instr.attrs().get_ints("perm");
  Ints xstrides = row_major_strides(x.shape().dims());
  Ints xi(perm.size());
  std::vector<double> out;
  out.reserve(instr.shape().num_elements());
  for_each_index(instr.shape().dims(), [&](const Ints& r) {
    for (size_t i = 0; i < perm.size(); ++i) xi[perm[i]] = r[i];
    out.push_back(x.at(flat_index(xi, xstrides)));
  });
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_transpose(VjpContext& c) {
  const Ints& perm = c.instr->attrs().get_ints("perm");
  Ints inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {c.b.transpose(c.dout(), inverse)};
}

DimMap transpose_dim_map(const Instr& instr) {
  const Ints& perm = instr.attrs().get_ints("perm");
  std::vector<int> m(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) m[perm[i]] = static_cast<int>(i);
  return {m};
}

// ---- slice: [start, limit) with strides; result dim = ceil((limit - start) / stride) ----

Ints slice_strides(const ir::Attrs& attrs, int rank) { return attrs.get_ints_or("strides", Ints(rank, 1)); }

Result<Shape> slice_rule(const InferContext& ctx) {
  const Shape& x = ctx.operands[0];
  KILN_RETURN_IF_ERROR(check_array("slice", x));
  const Ints& start = ctx.attrs.get_ints("start");
  const Ints& limit = ctx.attrs.get_ints("limit");
  Ints strides = slice_strides(ctx.attrs, x.rank());
  KILN_RETURN_IF_ERROR(check_per_dim("slice", "start", start, x));
  KILN_RETURN_IF_ERROR(check_per_dim("slice", "limit", limit, x));
  KILN_RETURN_IF_ERROR(check_per_dim("slice", "strides", strides, x));
  Ints dims(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    if (strides[i] < 1) return invalid_argument("slice strides={} must be positive", dims_to_string(strides));
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > x.dim(i)) {
      return invalid_argument("slice dimension {} takes [{}, {}) of {} (size {}); need 0 <= start <= limit <= size", i,
                              start[i], limit[i], x.to_string(), x.dim(i));
    }
    dims[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
  }
  return x.with_dims(std::move(dims));
}

ir::Literal eval_slice(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const Ints& start = instr.attrs().get_ints("start");
  Ints strides = slice_strides(instr.attrs(), x.shape().rank());
  Ints xstrides = row_major_strides(x.shape().dims());
  Ints xi(start.size());
  std::vector<double> out;
  out.reserve(instr.shape().num_elements());
  for_each_index(instr.shape().dims(), [&](const Ints& r) {
    for (size_t i = 0; i < start.size(); ++i) xi[i] = start[i] + r[i] * strides[i];
    out.push_back(x.at(flat_index(xi, xstrides)));
  });
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_slice(VjpContext& c) {
  // Put each gradient element back where it was taken from: pad with zeros, low = start,
  // interior = stride - 1, and high whatever fills the operand's size.
  const Shape& x = c.operand(0)->shape();
  const Shape& y = c.instr->shape();
  const Ints& start = c.instr->attrs().get_ints("start");
  Ints strides = slice_strides(c.instr->attrs(), x.rank());
  Ints high(x.rank()), interior(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    interior[i] = strides[i] - 1;
    int64_t covered = y.dim(i) == 0 ? 0 : (y.dim(i) - 1) * strides[i] + 1;  // start .. last taken element
    high[i] = x.dim(i) - start[i] - covered;
  }
  if (all_equal(interior, 0)) interior.clear();
  Instr* zero = c.b.scalar(x.dtype(), 0.0);
  return {c.b.pad(c.dout(), zero, start, std::move(high), std::move(interior))};
}

DimMap slice_dim_map(const Instr& instr) {
  const Shape& x = instr.operand(0)->shape();
  const Ints& start = instr.attrs().get_ints("start");
  const Ints& limit = instr.attrs().get_ints("limit");
  Ints strides = slice_strides(instr.attrs(), x.rank());
  return {same_dims_where(x.rank(), [&](int i) { return start[i] == 0 && limit[i] == x.dim(i) && strides[i] == 1; })};
}

Cost slice_cost(const Instr& instr) {
  // Reads only the elements it takes.
  Cost c;
  c.bytes_read = c.bytes_written = static_cast<double>(instr.shape().byte_size());
  return c;
}

// ---- pad(x, value): low/high edges and interior gaps between elements, filled with value ----

Ints pad_interior(const ir::Attrs& attrs, int rank) { return attrs.get_ints_or("interior", Ints(rank, 0)); }

Result<Shape> pad_rule(const InferContext& ctx) {
  const Shape& x = ctx.operands[0];
  const Shape& value = ctx.operands[1];
  KILN_RETURN_IF_ERROR(check_array("pad", x));
  KILN_RETURN_IF_ERROR(check_array("pad", value));
  if (value.rank() != 0 || value.dtype() != x.dtype()) {
    return invalid_argument("pad value must be a scalar {}[] like the operand {}, got {}", ir::dtype_name(x.dtype()),
                            x.to_string(), value.to_string());
  }
  const Ints& low = ctx.attrs.get_ints("low");
  const Ints& high = ctx.attrs.get_ints("high");
  Ints interior = pad_interior(ctx.attrs, x.rank());
  KILN_RETURN_IF_ERROR(check_per_dim("pad", "low", low, x));
  KILN_RETURN_IF_ERROR(check_per_dim("pad", "high", high, x));
  KILN_RETURN_IF_ERROR(check_per_dim("pad", "interior", interior, x));
  KILN_RETURN_IF_ERROR(check_non_negative("pad", "low", low));
  KILN_RETURN_IF_ERROR(check_non_negative("pad", "high", high));
  KILN_RETURN_IF_ERROR(check_non_negative("pad", "interior", interior));
  Ints dims(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    dims[i] = low[i] + high[i] + x.dim(i) + std::max<int64_t>(x.dim(i) - 1, 0) * interior[i];
  }
  return x.with_dims(std::move(dims));
}

ir::Literal eval_pad(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const Ints& low = instr.attrs().get_ints("low");
  Ints interior = pad_interior(instr.attrs(), x.shape().rank());
  std::vector<double> out(instr.shape().num_elements(), args[1]->scalar_value());
  Ints ostrides = row_major_strides(instr.shape().dims());
  Ints ri(low.size());
  int64_t k = 0;
  for_each_index(x.shape().dims(), [&](const Ints& xi) {
    for (size_t i = 0; i < low.size(); ++i) ri[i] = low[i] + xi[i] * (interior[i] + 1);
    out[flat_index(ri, ostrides)] = x.at(k++);
  });
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_pad(VjpContext& c) {
  // x: the strided slice of g where x's elements landed. value: every other element of g.
  const Shape& x = c.operand(0)->shape();
  const Ints& low = c.instr->attrs().get_ints("low");
  Ints interior = pad_interior(c.instr->attrs(), x.rank());
  Ints limit(x.rank()), strides(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    strides[i] = interior[i] + 1;
    limit[i] = low[i] + (x.dim(i) == 0 ? 0 : (x.dim(i) - 1) * strides[i] + 1);
  }
  if (all_equal(strides, 1)) strides.clear();
  Instr* g = c.dout();
  Instr* gx = c.b.slice(g, low, std::move(limit), std::move(strides));
  Ints all = internal::iota_vector(x.rank());
  Instr* gvalue = c.b.sub(c.b.reduce_sum(g, all), c.b.reduce_sum(gx, all));
  return {gx, gvalue};
}

DimMap pad_dim_map(const Instr& instr) {
  const Shape& x = instr.operand(0)->shape();
  const Ints& low = instr.attrs().get_ints("low");
  const Ints& high = instr.attrs().get_ints("high");
  Ints interior = pad_interior(instr.attrs(), x.rank());
  return {same_dims_where(x.rank(), [&](int i) { return low[i] == 0 && high[i] == 0 && interior[i] == 0; }), {}};
}

// ---- concatenate(x0, x1, ...) along dim ----

Result<Shape> concatenate_rule(const InferContext& ctx) {
  const Shape& first = ctx.operands[0];
  for (const Shape& s : ctx.operands) KILN_RETURN_IF_ERROR(check_array("concatenate", s));
  int64_t dim = ctx.attrs.get_int("dim");
  if (dim < 0 || dim >= first.rank()) {
    return invalid_argument("concatenate dim={} outside the rank {} of {}", dim, first.rank(), first.to_string());
  }
  Ints dims = first.dims();
  dims[dim] = 0;
  for (size_t k = 0; k < ctx.operands.size(); ++k) {
    const Shape& s = ctx.operands[k];
    bool same = s.dtype() == first.dtype() && s.rank() == first.rank();
    for (int i = 0; same && i < s.rank(); ++i) same = i == dim || s.dim(i) == first.dim(i);
    if (!same) {
      return invalid_argument(
          "concatenate operands must have one element type and equal dims except dim={}: operand 0 is {}, operand {} "
          "is {}",
          dim, first.to_string(), k, s.to_string());
    }
    dims[dim] += s.dim(static_cast<int>(dim));
  }
  return first.with_dims(std::move(dims));
}

ir::Literal eval_concatenate(const Instr& instr, std::span<const ir::Literal* const> args) {
  int64_t dim = instr.attrs().get_int("dim");
  std::vector<double> out(instr.shape().num_elements());
  Ints ostrides = row_major_strides(instr.shape().dims());
  int64_t offset = 0;
  for (const ir::Literal* x : args) {
    int64_t k = 0;
    for_each_index(x->shape().dims(), [&](const Ints& xi) {
      Ints ri = xi;
      ri[dim] += offset;
      out[flat_index(ri, ostrides)] = x->at(k++);
    });
    offset += x->shape().dim(static_cast<int>(dim));
  }
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_concatenate(VjpContext& c) {
  int64_t dim = c.instr->attrs().get_int("dim");
  Ints start(c.instr->shape().rank(), 0);
  Ints limit = c.instr->shape().dims();
  std::vector<Instr*> grads;
  for (Instr* x : c.instr->operands()) {
    limit[dim] = start[dim] + x->shape().dim(static_cast<int>(dim));
    grads.push_back(c.b.slice(c.dout(), start, limit));
    start[dim] = limit[dim];
  }
  return grads;
}

DimMap concatenate_dim_map(const Instr& instr) {
  int64_t dim = instr.attrs().get_int("dim");
  DimMap out;
  for (const Instr* x : instr.operands()) out.push_back(same_dims_where(x->shape().rank(), [&](int i) { return i != dim; }));
  return out;
}

// ---- dynamic_slice(x, s0, s1, ...): a sizes-shaped window at clamped runtime starts ----

Result<Shape> dynamic_slice_rule(const InferContext& ctx) {
  const Shape& x = ctx.operands[0];
  KILN_RETURN_IF_ERROR(check_array("dynamic_slice", x));
  KILN_RETURN_IF_ERROR(check_starts("dynamic_slice", ctx.operands.subspan(1), x));
  const Ints& sizes = ctx.attrs.get_ints("sizes");
  KILN_RETURN_IF_ERROR(check_per_dim("dynamic_slice", "sizes", sizes, x));
  for (int i = 0; i < x.rank(); ++i) {
    if (sizes[i] < 0 || sizes[i] > x.dim(i)) {
      return invalid_argument("dynamic_slice sizes={} must lie in [0, dim size] of {} (dimension {})",
                              dims_to_string(sizes), x.to_string(), i);
    }
  }
  return x.with_dims(sizes);
}

ir::Literal eval_dynamic_slice(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const Ints& sizes = instr.attrs().get_ints("sizes");
  Ints start = clamped_starts(args.subspan(1), x.shape().dims(), sizes);
  Ints xstrides = row_major_strides(x.shape().dims());
  Ints xi(start.size());
  std::vector<double> out;
  out.reserve(instr.shape().num_elements());
  for_each_index(sizes, [&](const Ints& r) {
    for (size_t i = 0; i < start.size(); ++i) xi[i] = start[i] + r[i];
    out.push_back(x.at(flat_index(xi, xstrides)));
  });
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_dynamic_slice(VjpContext& c) {
  // The same clamped window, written into zeros. Start indices are integers: no gradient.
  std::vector<Instr*> starts(c.instr->operands().begin() + 1, c.instr->operands().end());
  std::vector<Instr*> grads = {c.b.dynamic_update_slice(c.b.zeros_like(c.operand(0)), c.dout(), starts)};
  grads.resize(c.instr->num_operands(), nullptr);
  return grads;
}

DimMap dynamic_slice_dim_map(const Instr& instr) {
  // A dimension taken whole always starts at 0 (clamped), so it is the same dimension.
  const Shape& x = instr.operand(0)->shape();
  const Ints& sizes = instr.attrs().get_ints("sizes");
  DimMap out = {same_dims_where(x.rank(), [&](int i) { return sizes[i] == x.dim(i); })};
  out.resize(instr.num_operands());  // start indices are scalars
  return out;
}

Cost dynamic_slice_cost(const Instr& instr) {
  // Reads the window and the start indices.
  Cost c;
  c.bytes_written = static_cast<double>(instr.shape().byte_size());
  c.bytes_read = c.bytes_written;
  for (int k = 1; k < instr.num_operands(); ++k) c.bytes_read += static_cast<double>(instr.operand(k)->shape().byte_size());
  return c;
}

// ---- dynamic_update_slice(x, update, s0, ...): x with update written at clamped starts ----

Result<Shape> dynamic_update_slice_rule(const InferContext& ctx) {
  const Shape& x = ctx.operands[0];
  const Shape& update = ctx.operands[1];
  KILN_RETURN_IF_ERROR(check_array("dynamic_update_slice", x));
  KILN_RETURN_IF_ERROR(check_array("dynamic_update_slice", update));
  bool fits = update.dtype() == x.dtype() && update.rank() == x.rank();
  for (int i = 0; fits && i < x.rank(); ++i) fits = update.dim(i) <= x.dim(i);
  if (!fits) {
    return invalid_argument(
        "dynamic_update_slice update must have the operand's element type and rank and fit inside it: operand {}, "
        "update {}",
        x.to_string(), update.to_string());
  }
  KILN_RETURN_IF_ERROR(check_starts("dynamic_update_slice", ctx.operands.subspan(2), x));
  return x;
}

ir::Literal eval_dynamic_update_slice(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& x = *args[0];
  const ir::Literal& update = *args[1];
  Ints start = clamped_starts(args.subspan(2), x.shape().dims(), update.shape().dims());
  Ints xstrides = row_major_strides(x.shape().dims());
  std::vector<double> out = x.values();
  Ints xi(start.size());
  int64_t k = 0;
  for_each_index(update.shape().dims(), [&](const Ints& ui) {
    for (size_t i = 0; i < start.size(); ++i) xi[i] = start[i] + ui[i];
    out[flat_index(xi, xstrides)] = update.at(k++);
  });
  return ir::Literal(instr.shape(), std::move(out));
}

std::vector<Instr*> vjp_dynamic_update_slice(VjpContext& c) {
  // x: g with the overwritten window zeroed. update: the window of g. Starts: no gradient.
  Instr* update = c.operand(1);
  std::vector<Instr*> starts(c.instr->operands().begin() + 2, c.instr->operands().end());
  Instr* g = c.dout();
  std::vector<Instr*> grads = {c.b.dynamic_update_slice(g, c.b.zeros_like(update), starts),
                               c.b.dynamic_slice(g, starts, update->shape().dims())};
  grads.resize(c.instr->num_operands(), nullptr);
  return grads;
}

DimMap dynamic_update_slice_dim_map(const Instr& instr) {
  const Shape& x = instr.operand(0)->shape();
  const Shape& update = instr.operand(1)->shape();
  DimMap out = {same_dims_where(x.rank(), [](int) { return true; }),
                same_dims_where(update.rank(), [&](int i) { return update.dim(i) == x.dim(i); })};
  out.resize(instr.num_operands());
  return out;
}

Cost dynamic_update_slice_cost(const Instr& instr) {
  // Counted as done in place (the result reuses x's buffer), as XLA's cost analysis does:
  // the update and starts are read, the window is written.
  Cost c;
  for (int k = 1; k < instr.num_operands(); ++k) c.bytes_read += static_cast<double>(instr.operand(k)->shape().byte_size());
  c.bytes_written = static_cast<double>(instr.operand(1)->shape().byte_size());
  return c;
}

// ---- examples: module text with the op's inputs as parameters ----

std::string example(std::string_view params, std::string_view root) {
  return fmt::format("module @ex\n\nENTRY computation @main {{\n{}  ROOT {}\n}}\n", params, root);
}

}  // namespace

void register_shape_ops(OpTable& table) {
  {
    OpDef d;
    d.opcode = Opcode::kBroadcast;
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"dims", AttrKind::kInts}};
    d.infer = broadcast_rule;
    d.eval = eval_broadcast;
    d.vjp = vjp_broadcast;
    d.dim_map = broadcast_dim_map;
    d.split_map = same_size_dims(broadcast_dim_map);
    d.rearranges = true;
    d.mapped_read = MappedRead::kBroadcast;
    d.cost = memory_cost;
    d.examples = {
        // Expands the size-1 dim and adds a new leading dim.
        {example("  %x = f32[3,1] parameter(), index=0\n", "%b = f32[2,3,4] broadcast(%x), dims={1,2}")},
        {example("  %x = f32[] parameter(), index=0\n", "%b = f32[2,3] broadcast(%x), dims={}")},
        {example("  %x = f32[3] parameter(), index=0\n", "%b = f32[3,4] broadcast(%x), dims={0}")},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kReshape;
    d.aliases_operand = true;  // the same elements in the same order
    d.min_operands = d.max_operands = 1;
    d.infer = reshape_rule;
    d.eval = eval_reshape;
    d.vjp = vjp_reshape;
    d.dim_map = reshape_dim_map;
    d.split_map = reshape_split_map;
    d.rearranges = true;
    d.cost = memory_cost;
    d.examples = {
        {example("  %x = f32[2,3,4] parameter(), index=0\n", "%r = f32[6,1,4] reshape(%x)")},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kTranspose;
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"perm", AttrKind::kInts}};
    d.infer = transpose_rule;
    d.eval = eval_transpose;
    d.vjp = vjp_transpose;
    d.dim_map = transpose_dim_map;
    d.split_map = same_size_dims(transpose_dim_map);
    d.rearranges = true;
    d.mapped_read = MappedRead::kTranspose;
    d.cost = memory_cost;
    d.examples = {
        {example("  %x = f32[2,3,4] parameter(), index=0\n", "%t = f32[4,2,3] transpose(%x), perm={2,0,1}")},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kSlice;
    d.min_operands = d.max_operands = 1;
    d.attrs = {{"start", AttrKind::kInts}, {"limit", AttrKind::kInts}, {"strides", AttrKind::kInts, false}};
    d.infer = slice_rule;
    d.eval = eval_slice;
    d.vjp = vjp_slice;
    d.dim_map = slice_dim_map;
    d.split_map = same_size_dims(slice_dim_map);
    d.rearranges = true;
    d.mapped_read = MappedRead::kWindow;
    d.cost = slice_cost;
    d.examples = {
        {example("  %x = f32[4,5] parameter(), index=0\n", "%s = f32[2,5] slice(%x), limit={3,5}, start={1,0}")},
        // Strided: rows 1 and 3 of [1,5), columns 0 and 3 of [0,5) (the last stride is partial).
        {example("  %x = f32[5,5] parameter(), index=0\n",
                 "%s = f32[2,2] slice(%x), limit={5,5}, start={1,0}, strides={2,3}")},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kPad;
    d.min_operands = d.max_operands = 2;
    d.attrs = {{"low", AttrKind::kInts}, {"high", AttrKind::kInts}, {"interior", AttrKind::kInts, false}};
    d.infer = pad_rule;
    d.eval = eval_pad;
    d.vjp = vjp_pad;
    d.dim_map = pad_dim_map;
    d.split_map = same_size_dims(pad_dim_map);
    d.mapped_read = MappedRead::kWindow;
    d.cost = memory_cost;
    d.examples = {
        {example("  %x = f32[2,3] parameter(), index=0\n  %v = f32[] parameter(), index=1\n",
                 "%p = f32[4,9] pad(%x, %v), high={0,2}, interior={1,2}, low={1,0}")},
        {example("  %x = f32[3,2] parameter(), index=0\n  %v = f32[] parameter(), index=1\n",
                 "%p = f32[3,5] pad(%x, %v), high={0,1}, low={0,2}")},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kConcatenate;
    d.min_operands = 1;
    d.max_operands = -1;
    d.attrs = {{"dim", AttrKind::kInt}};
    d.infer = concatenate_rule;
    d.eval = eval_concatenate;
    d.vjp = vjp_concatenate;
    d.dim_map = concatenate_dim_map;
    d.split_map = same_size_dims(concatenate_dim_map);
    d.cost = memory_cost;
    d.examples = {
        {example("  %a = f32[2,3] parameter(), index=0\n  %b = f32[2,1] parameter(), index=1\n"
                 "  %c = f32[2,2] parameter(), index=2\n",
                 "%r = f32[2,6] concatenate(%a, %b, %c), dim=1")},
        {example("  %a = f32[1,3] parameter(), index=0\n  %b = f32[2,3] parameter(), index=1\n",
                 "%r = f32[3,3] concatenate(%a, %b), dim=0")},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kDynamicSlice;
    d.min_operands = 1;
    d.max_operands = -1;
    d.attrs = {{"sizes", AttrKind::kInts}};
    d.infer = dynamic_slice_rule;
    d.eval = eval_dynamic_slice;
    d.vjp = vjp_dynamic_slice;
    d.dim_map = dynamic_slice_dim_map;
    d.cost = dynamic_slice_cost;
    // Starts drawn from [-2, 6): negative and too-large starts exercise the clamping.
    d.examples = {
        {example("  %x = f32[4,5] parameter(), index=0\n  %i = s32[] parameter(), index=1\n"
                 "  %j = s32[] parameter(), index=2\n",
                 "%s = f32[2,3] dynamic_slice(%x, %i, %j), sizes={2,3}"),
         {{-2, 2}, {-2, 6}, {-2, 6}}},
        {example("  %x = f32[3,4] parameter(), index=0\n  %i = s32[] parameter(), index=1\n"
                 "  %j = s32[] parameter(), index=2\n",
                 "%s = f32[3,2] dynamic_slice(%x, %i, %j), sizes={3,2}"),
         {{-2, 2}, {-2, 6}, {-2, 6}}},
    };
    table.add(std::move(d));
  }
  {
    OpDef d;
    d.opcode = Opcode::kDynamicUpdateSlice;
    d.min_operands = 2;
    d.max_operands = -1;
    d.infer = dynamic_update_slice_rule;
    d.eval = eval_dynamic_update_slice;
    d.vjp = vjp_dynamic_update_slice;
    d.dim_map = dynamic_update_slice_dim_map;
    d.cost = dynamic_update_slice_cost;
    d.examples = {
        {example("  %x = f32[4,5] parameter(), index=0\n  %u = f32[2,3] parameter(), index=1\n"
                 "  %i = s32[] parameter(), index=2\n  %j = s32[] parameter(), index=3\n",
                 "%r = f32[4,5] dynamic_update_slice(%x, %u, %i, %j)"),
         {{-2, 2}, {-2, 2}, {-2, 6}, {-2, 6}}},
    };
    table.add(std::move(d));
  }
}

}  // namespace kiln::ops
