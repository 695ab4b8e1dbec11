#include "kiln/checkpoint/hf_common.h"

namespace kiln::checkpoint {

Result<ConfigYaml> ConfigYaml::parse(const std::string& text) {
  ConfigYaml c;
  try {
    c.yaml_ = YAML::Load(text);
  } catch (const std::exception& e) {
    return invalid_argument("the checkpoint's config is not YAML: {}", e.what());
  }
  return c;
}

Result<ir::Shape> kiln_shape(const std::map<std::string, ir::Shape>& k, const std::string& name, int rank) {
  auto it = k.find(name);
  if (it == k.end()) return not_found("Kiln tensor {} is missing", name);
  if (it->second.rank() != rank) {
    return invalid_argument("Kiln tensor {} is {}, expected rank {}", name, it->second.to_string(), rank);
  }
  return it->second;
}

std::vector<double> transpose2d(const std::vector<double>& x, int64_t rows, int64_t cols, int64_t offset) {
  std::vector<double> y(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c * rows + r] = x[offset + r * cols + c];
  return y;
}

ir::Literal literal_of(ir::DType dtype, std::vector<int64_t> dims, std::vector<double> values) {
  ir::Literal out(ir::Shape(dtype, std::move(dims)));
  out.mutable_values() = std::move(values);
  return out;
}

Result<int64_t> config_int(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) {
    return invalid_argument("config.json: {} is {}, expected an integer", key, j[key].dump());
  }
  return j[key].get<int64_t>();
}

Result<bool> config_bool(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return invalid_argument("config.json: {} is {}, expected true or false", key, j[key].dump());
  return j[key].get<bool>();
}

Result<double> config_number(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) return invalid_argument("config.json: {} is {}, expected a number", key, j[key].dump());
  return j[key].get<double>();
}

std::string dtype_word(ir::DType t) { return t == ir::DType::kBF16 ? "bfloat16" : "float32"; }

}  // namespace kiln::checkpoint
