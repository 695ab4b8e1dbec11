// Literal: a host value of a given shape. Elements are stored as doubles, each already
// rounded to the shape's dtype (round_to_dtype), which represents every dtype of the IR
// exactly (pred, s32, u32, bf16, f32, f64). It is the interpreter's value type and the
// payload of constants; the compiled backends use typed buffers instead.
#pragma once

#include <string>
#include <vector>

#include "kiln/ir/shape.h"

namespace kiln::ir {

class Literal {
 public:
  Literal() = default;
  explicit Literal(Shape shape);  // zeros (or a tuple of zeros)
  Literal(Shape shape, std::vector<double> values);  // rounds each value to the dtype
  static Literal scalar(DType dtype, double value);
  static Literal tuple(std::vector<Literal> elements);

  const Shape& shape() const { return shape_; }
  const std::vector<double>& values() const { return values_; }
  std::vector<double>& mutable_values() { return values_; }
  double at(int64_t flat_index) const { return values_[flat_index]; }
  double scalar_value() const;  // checks one element
  const std::vector<Literal>& elements() const { return elements_; }
  const Literal& element(int i) const { return elements_.at(i); }

  // Re-rounds all values to the dtype (after writing through mutable_values()).
  void round_all();
  bool operator==(const Literal& other) const;  // bitwise on the double values, NaN == NaN

  // Values as printed in IR text: "1.5" for a scalar, "{1, 2, 3}" flattened for arrays.
  // Every value prints so that parsing it back rounds to the same value in its dtype.
  std::string values_to_string() const;
  std::string to_string() const;  // shape and values, for test failure messages

 private:
  Shape shape_;
  std::vector<double> values_;
  std::vector<Literal> elements_;
};

// Formats one value of `dtype` so that it parses back exactly ("inf", "-inf", "nan" too).
std::string format_value(DType dtype, double value);

}  // namespace kiln::ir
