// Op attributes: a small typed map printed as `key=value` after an instruction's operands.
// Values are integers, floats, integer lists ({1,2}) or strings (bare identifiers like
// `sum` print unquoted, anything else quoted). Which attributes an op takes is declared in
// its registry entry; this type knows nothing about ops.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::ir {

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  bool has(const std::string& key) const { return map_.count(key) > 0; }
  void set(const std::string& key, AttrValue value) { map_[key] = std::move(value); }
  void erase(const std::string& key) { map_.erase(key); }
  const std::map<std::string, AttrValue>& map() const { return map_; }
  bool empty() const { return map_.empty(); }

  // Typed access; these check the attribute exists with that type (the verifier has
  // already checked attributes against the op's declaration).
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // an int attribute reads as a float too
  const std::string& get_string(const std::string& key) const;
  const std::vector<int64_t>& get_ints(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  std::vector<int64_t> get_ints_or(const std::string& key, std::vector<int64_t> fallback) const;

  bool operator==(const Attrs& other) const { return map_ == other.map_; }

 private:
  std::map<std::string, AttrValue> map_;
};

std::string attr_value_to_string(const AttrValue& value);
bool is_identifier(const std::string& text);
// "text" with quotes, backslashes and newlines escaped (the parser reads it back).
std::string quote_string(const std::string& text);

// Sharding of an array value over a device mesh: for each dimension, the mesh axes it is
// split over (outermost first); an empty list means that dimension is replicated.
// Printed as {[fsdp],[],[tensor,expert]}.
struct Sharding {
  std::vector<std::vector<std::string>> dims;
  bool operator==(const Sharding& other) const { return dims == other.dims; }
  std::string to_string() const;
};

}  // namespace kiln::ir
