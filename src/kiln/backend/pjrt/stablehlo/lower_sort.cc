// sort and topk along the last dimension, both as one stable stablehlo.sort of (x, iota):
//
//   x [.., n] -> sort:  (values [.., n], s32 indices [.., n])
//             -> topk:  the descending sort sliced to [.., k]
//
// The comparator spells out Kiln's order instead of StableHLO's TOTALORDER compare: every
// NaN is above every number and all NaNs are equal, and -0 equals +0 (TOTALORDER puts -NaN
// first and -0 before +0, which would reorder ties Kiln keeps in index order). With a stable
// sort, equal keys keep their index order, which is also topk's tie rule (lower index first),
// so topk is exactly the first k of the stable descending sort. (chlo.top_k is not used: its
// order of ties and NaNs is the platform's.)
#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
namespace {

using ir::DType;

// a < b in Kiln's order (floats: !isnan(a) && (isnan(b) || a < b)), as an i1 scalar.
Val value_less(Writer& w, const Val& a, const Val& b, bool floating) {
  const Val less = w.compare(a, b, "LT");
  if (!floating) return less;
  const Val a_nan = w.compare(a, a, "NE"), b_nan = w.compare(b, b, "NE");
  const Val b_nan_or_less = w.binary("stablehlo.or", b_nan, less);
  return w.binary("stablehlo.and", w.unary("stablehlo.not", a_nan), b_nan_or_less);
}

// (values, s32 indices) of x [.., n] sorted stably along the last dim.
std::vector<Val> sort_rows(Writer& w, const ir::Shape& x, const Val& xv, bool descending) {
  const int64_t last = x.rank() - 1;
  const Val iota = w.op("stablehlo.iota", {}, tensor_type(DType::kS32, x.dims()),
                        fmt::format("iota_dimension = {} : i64", last));
  const std::string scalar = tensor_type(x.dtype(), {});
  const std::string index = tensor_type(DType::kS32, {});
  const bool floating = ir::is_floating(x.dtype());
  const std::vector<std::string> regions = {
      w.region({scalar, scalar, index, index}, [&](Writer& rw, std::span<const Val> args) {
        return std::vector<Val>{descending ? value_less(rw, args[1], args[0], floating)
                                           : value_less(rw, args[0], args[1], floating)};
      })};
  return w.op_multi("stablehlo.sort", std::vector<Val>{xv, iota}, {xv.type, iota.type},
                    fmt::format("dimension = {} : i64, is_stable = true", last), regions);
}

Result<Vals> sort(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  const bool descending = instr.attrs().get_int_or("descending", 0) != 0;
  return sort_rows(ctx.w, instr.operand(0)->shape(), array_operand(operands, 0), descending);
}

Result<Vals> topk(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals> operands) {
  Writer& w = ctx.w;
  const ir::Shape& x = instr.operand(0)->shape();
  const std::vector<Val> sorted = sort_rows(w, x, array_operand(operands, 0), /*descending=*/true);
  const int64_t k = instr.attrs().get_int("k");
  std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  limit.back() = k;
  const std::string bounds = fmt::format("start_indices = {}, limit_indices = {}, strides = {}", i64_array(start),
                                         i64_array(limit), i64_array(strides));
  Vals out;
  for (int i = 0; i < 2; ++i) {
    const std::string type = tensor_type(instr.shape().element(i));
    out.push_back(sorted[i].type == type ? sorted[i] : w.op("stablehlo.slice", {sorted[i]}, type, bounds));
  }
  return out;
}

}  // namespace

void register_sort_lowerings(LoweringTable& table) {
  table.add(ir::Opcode::kSort, sort);
  table.add(ir::Opcode::kTopK, topk);
}

}  // namespace kiln::backend::pjrt
