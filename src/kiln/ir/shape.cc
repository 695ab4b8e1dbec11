#include "kiln/ir/shape.h"

#include "kiln/base/check.h"

namespace kiln::ir {

Shape Shape::tuple(std::vector<Shape> elements) {
  Shape s;
  s.is_tuple_ = true;
  s.elements_ = std::move(elements);
  return s;
}

DType Shape::dtype() const {
  KILN_CHECK(!is_tuple_) << "dtype() of tuple shape " << to_string();
  return dtype_;
}

int64_t Shape::dim(int i) const {
  KILN_CHECK(i >= 0 && i < rank()) << "dim " << i << " of " << to_string();
  return dims_[i];
}

int64_t Shape::num_elements() const {
  KILN_CHECK(!is_tuple_) << "num_elements() of tuple shape " << to_string();
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::byte_size() const {
  if (is_tuple_) {
    int64_t total = 0;
    for (const auto& e : elements_) total += e.byte_size();
    return total;
  }
  return num_elements() * dtype_size(dtype_);
}

const Shape& Shape::element(int i) const {
  KILN_CHECK(is_tuple_ && i >= 0 && i < static_cast<int>(elements_.size()))
      << "element " << i << " of " << to_string();
  return elements_[i];
}

std::string Shape::to_string() const {
  std::string out;
  if (is_tuple_) {
    out = "(";
    for (size_t i = 0; i < elements_.size(); ++i) {
      if (i) out += ", ";
      out += elements_[i].to_string();
    }
    return out + ")";
  }
  out = std::string(dtype_name(dtype_)) + "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(dims_[i]);
  }
  return out + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (is_tuple_ != other.is_tuple_) return false;
  if (is_tuple_) return elements_ == other.elements_;
  return dtype_ == other.dtype_ && dims_ == other.dims_;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  std::string out = "{";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(dims[i]);
  }
  return out + "}";
}

}  // namespace kiln::ir
