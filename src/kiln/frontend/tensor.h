// The tracing frontend: model code is ordinary C++ over Tensor handles with numpy-like
// operations; each operation appends IR to the Graph being traced. Binary operations
// broadcast like numpy (trailing dimensions aligned, size 1 expands); a Tensor combined
// with a C++ number takes the Tensor's dtype. Tensors must share a dtype otherwise
// (convert explicitly with astype), as mixed precision is always a deliberate choice.
//
//   Graph g("block");
//   Tensor x = g.parameter("x", f32({8, 64}), {"activation_batch", "activation_embed"});
//   Tensor y = (x * 2.0 + 1.0).sum({1}).named("row_sums");
#pragma once

#include <initializer_list>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/instr.h"

namespace kiln::frontend {

using ir::DType;
using ir::Shape;

class Graph;

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* graph, ir::Instr* instr) : graph_(graph), instr_(instr) {}

  ir::Instr* instr() const { return instr_; }
  Graph* graph() const { return graph_; }
  bool valid() const { return instr_ != nullptr; }
  const Shape& shape() const { return instr_->shape(); }
  DType dtype() const { return shape().dtype(); }
  int rank() const { return shape().rank(); }
  int64_t dim(int axis) const;  // negative counts from the end
  const std::vector<int64_t>& dims() const { return shape().dims(); }

  // Metadata: `named` gives the value the name "<scope>.<name>" (and records the caller's
  // source line); `axes` records its logical axis names for sharding (one per dim, "" none).
  Tensor named(const std::string& name, std::source_location loc = std::source_location::current()) const;
  Tensor axes(std::vector<std::string> logical_axes) const;

  // Shapes.
  Tensor reshape(std::vector<int64_t> dims) const;  // one -1 is inferred
  Tensor transpose(std::vector<int64_t> perm) const;
  Tensor broadcast_to(std::vector<int64_t> dims) const;  // numpy rules
  Tensor expand_dims(int axis) const;
  Tensor squeeze(int axis) const;
  Tensor astype(DType dtype) const;
  // x[..., start:stop:step, ...] along one axis.
  Tensor slice(int axis, int64_t start, int64_t stop, int64_t step = 1) const;

  // Reductions (axes may be negative; keepdims keeps size-1 dims).
  Tensor sum(std::vector<int64_t> axes, bool keepdims = false) const;
  Tensor mean(std::vector<int64_t> axes, bool keepdims = false) const;
  Tensor max(std::vector<int64_t> axes, bool keepdims = false) const;
  Tensor min(std::vector<int64_t> axes, bool keepdims = false) const;
  Tensor sum() const;  // over everything, to a scalar

  // Gathers along `axis` at integer `indices` (tf.gather with batch_dims).
  Tensor take(const Tensor& indices, int axis, int batch_dims = 0) const;

  Tensor operator-() const;

 private:
  Graph* graph_ = nullptr;
  ir::Instr* instr_ = nullptr;
};

// Arithmetic with numpy broadcasting.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// Comparisons give pred tensors.
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);

// Elementwise functions.
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
Tensor clip(const Tensor& x, double lo, double hi);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor stop_gradient(const Tensor& x);
Tensor is_finite(const Tensor& x);

// Structure.
Tensor concatenate(const std::vector<Tensor>& xs, int axis);
// Top k along the last axis: (values descending, s32 indices); ties pick the lower index.
std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k);
// Sorted along the last axis: (values, s32 indices), stable.
std::pair<Tensor, Tensor> sort(const Tensor& x, bool descending = false);
// Adds `updates` into a copy of `x` at the positions x.take(indices, axis, batch_dims) reads.
Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates, int axis, int batch_dims = 0);
// One-hot encoding along a new last axis of size n.
Tensor one_hot(const Tensor& indices, int64_t n, DType dtype);

// Contractions. einsum takes one or two operands with single-letter labels and an explicit
// output ("bqhd,bkhd->bhqk"); labels missing from the output are summed. matmul follows
// numpy for rank >= 2 ([..., m, k] @ [k, n] or with equal batch dims).
Tensor einsum(const std::string& spec, const Tensor& a, const Tensor& b);
Tensor einsum(const std::string& spec, const Tensor& a);
Tensor matmul(const Tensor& a, const Tensor& b);

// Numpy-style broadcast of two shapes' dims (checks they are compatible).
std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace kiln::frontend
