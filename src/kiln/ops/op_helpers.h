// Helpers shared by the op family files: index arithmetic for reference evaluation,
// common shape checks, cost and dimension-map templates. Internal to ops/.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"

namespace kiln::ops::internal {

// Calls fn(index) for every multi-index of `dims` in row-major order.
template <typename Fn>
void for_each_index(const std::vector<int64_t>& dims, Fn&& fn) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    fn(index);
    for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
      if (++index[i] < dims[i]) break;
      index[i] = 0;
    }
  }
}

inline int64_t flat_index(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t f = 0;
  for (size_t i = 0; i < index.size(); ++i) f += index[i] * strides[i];
  return f;
}

inline std::vector<int64_t> iota_vector(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Checks that `dims` are distinct and within [0, rank).
Status check_dims(std::string_view op, std::string_view what, const std::vector<int64_t>& dims, int rank);
// Requires an array (not tuple) shape.
Status check_array(std::string_view op, const ir::Shape& shape);
Result<ir::Shape> require_declared(const InferContext& ctx, std::string_view op);
// `out` computed from the operands, or the declared shape when it has the same dims and
// another floating dtype (products with OpDef::declared_result_dtype).
Result<ir::Shape> declared_float_result(const InferContext& ctx, ir::Shape out, std::string_view op);

// Bytes of all operands plus the result.
Cost memory_cost(const ir::Instr& instr);
// Elementwise: one flop per element (times `flops_per_element`) plus transcendentals.
Cost elementwise_cost(const ir::Instr& instr, double flops_per_element, double transcendentals_per_element);
// No data touched (parameters, tuples).
Cost zero_cost(const ir::Instr& instr);

// Identity dimension map for every operand (elementwise ops).
std::vector<std::vector<int>> identity_dim_map(const ir::Instr& instr);
// No dimension corresponds (sources, reshapes that mix dims).
std::vector<std::vector<int>> empty_dim_map(const ir::Instr& instr);
// OpDef::split_map from a dim_map: only the dims that keep their size (a split of a sliced,
// padded or concatenated dim would not line up with the result's blocks).
DimMapFn same_size_dims(DimMapFn dim_map);

// Gradient helper: reduces `g` (shaped like a broadcast result) back to `operand_shape`
// given the broadcast's dims attribute.
Instr* unbroadcast(Builder& b, Instr* g, const ir::Shape& operand_shape, const std::vector<int64_t>& dims);

}  // namespace kiln::ops::internal
