// Pieces every family's Hugging Face mapping (hf_<family>.cc) reads its inputs with.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "kiln/base/status.h"
#include "kiln/ir/literal.h"
#include "kiln/ir/shape.h"

namespace kiln::checkpoint {

// The resolved Kiln config a checkpoint carries (YAML text), read key by key when exporting.
class ConfigYaml {
 public:
  // An error names the text as the checkpoint's config.
  static Result<ConfigYaml> parse(const std::string& text);
  // The key's value, or `fallback` when absent or not of type T (the family's own value: a
  // checkpoint written before a key existed).
  template <typename T>
  T get(const char* key, T fallback) const {
    try {
      return yaml_[key] ? yaml_[key].as<T>() : fallback;
    } catch (const std::exception&) {
      return fallback;
    }
  }

 private:
  YAML::Node yaml_;
};

// Kiln tensor `name`'s shape from a planned import's shapes; missing or not of `rank` is an
// error naming it.
Result<ir::Shape> kiln_shape(const std::map<std::string, ir::Shape>& k, const std::string& name, int rank);

// [rows, cols] row-major (flat values from `offset`) -> [cols, rows].
std::vector<double> transpose2d(const std::vector<double>& x, int64_t rows, int64_t cols, int64_t offset = 0);
// A literal holding `values` as they are (moved, never rounded: exact in the dtype).
ir::Literal literal_of(ir::DType dtype, std::vector<int64_t> dims, std::vector<double> values);

// How many of prefix<first>suffix, prefix<first+1>suffix, ... the map holds in a row.
template <typename Map>
int64_t count_layers(const Map& m, const std::string& prefix, const std::string& suffix, int64_t first = 0) {
  int64_t n = 0;
  while (m.count(prefix + std::to_string(first + n) + suffix)) ++n;
  return n;
}

// config.json's key as an integer, boolean or number: `fallback` when absent or null (the
// transformers class's default), an error naming the key when of another type.
Result<int64_t> config_int(const nlohmann::json& j, const char* key, int64_t fallback);
Result<bool> config_bool(const nlohmann::json& j, const char* key, bool fallback);
Result<double> config_number(const nlohmann::json& j, const char* key, double fallback);

// config.json's torch_dtype word of a Kiln dtype ("bfloat16" or "float32").
std::string dtype_word(ir::DType t);

}  // namespace kiln::checkpoint
