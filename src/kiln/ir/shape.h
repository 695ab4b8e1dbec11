// Static shapes: an element type and dimensions, or a tuple of shapes (for ops with several
// results, e.g. topk -> (values, indices)). Printed as "f32[4,8]", "s32[]", "(f32[2], s32[2])".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"

namespace kiln::ir {

class Shape {
 public:
  Shape() = default;  // f32[] (a scalar)
  Shape(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {}
  static Shape scalar(DType dtype) { return Shape(dtype, {}); }
  static Shape tuple(std::vector<Shape> elements);

  bool is_tuple() const { return is_tuple_; }
  DType dtype() const;  // checks !is_tuple()
  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const;
  int64_t num_elements() const;
  int64_t byte_size() const;  // tuples: sum of elements
  const std::vector<Shape>& elements() const { return elements_; }
  const Shape& element(int i) const;

  // Same element type, other dims / other element type, same dims.
  Shape with_dims(std::vector<int64_t> dims) const { return Shape(dtype(), std::move(dims)); }
  Shape with_dtype(DType dtype) const { return Shape(dtype, dims_); }

  std::string to_string() const;
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  bool is_tuple_ = false;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> dims_;
  std::vector<Shape> elements_;
};

// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);
std::string dims_to_string(const std::vector<int64_t>& dims);  // "{1,2,3}"

}  // namespace kiln::ir
