// A config value: bool, int, float, string or list (lists may nest, e.g. logical_axis_rules).
// Every key's type is the type of its default in configs/base.yml; values from model files,
// CONFIG.yml files and key=value overrides are converted to that type (parse_as) or
// rejected with a message that names what is accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::config {

enum class ValueKind { kBool, kInt, kFloat, kString, kList };

// "a boolean", "an integer", ... for error messages.
const char* kind_description(ValueKind kind);

class Value {
 public:
  Value() : data_(std::string()) {}
  static Value boolean(bool v) { return Value(Data(v)); }
  static Value integer(int64_t v) { return Value(Data(v)); }
  static Value floating(double v) { return Value(Data(v)); }
  static Value string(std::string v) { return Value(Data(std::move(v))); }
  static Value list(std::vector<Value> v) { return Value(Data(std::move(v))); }

  ValueKind kind() const { return static_cast<ValueKind>(data_.index()); }
  bool is_list() const { return kind() == ValueKind::kList; }

  // Accessors check the kind (a wrong kind is a bug in the caller, not bad input).
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;  // also accepts an int value
  const std::string& as_string() const;
  const std::vector<Value>& as_list() const;

  // YAML flow text: 12, 3.0e-05 -> 3e-05, true, "" or plain strings, [a, [b, c]].
  std::string to_yaml() const;

  bool operator==(const Value& other) const { return data_ == other.data_; }
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  // The order matches ValueKind.
  using Data = std::variant<bool, int64_t, double, std::string, std::vector<Value>>;
  explicit Value(Data d) : data_(std::move(d)) {}
  Data data_;
};

// YAML-style scalar literals, as MaxText's YAML loader reads them: "1_000" is 1000,
// "1.e-05" and "1e-5" are floats, "true"/"True"/"TRUE" are booleans.
std::optional<int64_t> parse_int_literal(std::string_view text);
std::optional<double> parse_float_literal(std::string_view text);
std::optional<bool> parse_bool_literal(std::string_view text);

// The value of a plain (unquoted) YAML scalar, typed by its spelling: bool, int, float or
// string. Used for base.yml itself, where the spelling defines each key's type.
Value infer_scalar(std::string_view text);

// Converts `value` to the type of `like` (a key's default). Ints are accepted for floats;
// list elements are checked against the default's element type when the default is a
// non-empty list of one scalar type. Returns a message fragment on mismatch
// ("expected an integer, got 1.5"); the caller adds the key and where it came from.
Result<Value> convert_like(const Value& value, const Value& like);

// Parses command-line text for a key whose default is `like`: "[a,b]" for lists (YAML flow
// syntax), true/false for booleans, integer or float literals, anything for strings.
Result<Value> parse_override_text(std::string_view text, const Value& like);

}  // namespace kiln::config
