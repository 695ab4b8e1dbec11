#include "kiln/ir/literal.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kiln/base/check.h"

namespace kiln::ir {

Literal::Literal(Shape shape) : shape_(std::move(shape)) {
  if (shape_.is_tuple()) {
    for (const auto& e : shape_.elements()) elements_.emplace_back(e);
  } else {
    values_.assign(shape_.num_elements(), 0.0);
  }
}

Literal::Literal(Shape shape, std::vector<double> values) : shape_(std::move(shape)), values_(std::move(values)) {
  KILN_CHECK(!shape_.is_tuple());
  KILN_CHECK_EQ(static_cast<int64_t>(values_.size()), shape_.num_elements()) << shape_.to_string();
  round_all();
}

Literal Literal::scalar(DType dtype, double value) { return Literal(Shape::scalar(dtype), {value}); }

Literal Literal::tuple(std::vector<Literal> elements) {
  std::vector<Shape> shapes;
  for (const auto& e : elements) shapes.push_back(e.shape());
  Literal lit;
  lit.shape_ = Shape::tuple(std::move(shapes));
  lit.elements_ = std::move(elements);
  return lit;
}

double Literal::scalar_value() const {
  KILN_CHECK_EQ(values_.size(), 1u) << shape_.to_string();
  return values_[0];
}

void Literal::round_all() {
  DType dtype = shape_.dtype();
  if (dtype == DType::kF64) return;
  for (double& v : values_) v = round_to_dtype(dtype, v);
}

bool Literal::operator==(const Literal& other) const {
  if (shape_ != other.shape_ || elements_.size() != other.elements_.size()) return false;
  for (size_t i = 0; i < elements_.size(); ++i) {
    if (!(elements_[i] == other.elements_[i])) return false;
  }
  if (values_.size() != other.values_.size()) return false;
  return values_.empty() || std::memcmp(values_.data(), other.values_.data(), values_.size() * sizeof(double)) == 0 ||
         [&] {
           for (size_t i = 0; i < values_.size(); ++i) {
             double a = values_[i], b = other.values_[i];
             if (!(a == b || (std::isnan(a) && std::isnan(b)))) return false;
           }
           return true;
         }();
}

std::string format_value(DType dtype, double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  switch (dtype) {
    case DType::kPred: return value != 0.0 ? "1" : "0";
    case DType::kS32:
    case DType::kU32: return fmt::format("{}", static_cast<int64_t>(value));
    case DType::kBF16:
    case DType::kF32: return fmt::format("{}", static_cast<float>(value));   // shortest round trip
    case DType::kF64: return fmt::format("{}", value);
  }
  return "?";
}

std::string Literal::values_to_string() const {
  if (shape_.is_tuple()) {
    std::string out = "(";
    for (size_t i = 0; i < elements_.size(); ++i) out += (i ? ", " : "") + elements_[i].values_to_string();
    return out + ")";
  }
  DType dtype = shape_.dtype();
  if (shape_.rank() == 0) return format_value(dtype, values_[0]);
  std::string out = "{";
  for (size_t i = 0; i < values_.size(); ++i) {
    if (i) out += ", ";
    out += format_value(dtype, values_[i]);
  }
  return out + "}";
}

std::string Literal::to_string() const { return shape_.to_string() + " " + values_to_string(); }

}  // namespace kiln::ir
