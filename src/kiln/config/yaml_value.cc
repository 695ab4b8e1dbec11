#include "kiln/config/yaml_value.h"

#include <filesystem>
#include <set>

namespace kiln::config {

Result<Value> value_from_yaml(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      // yaml-cpp tags quoted scalars "!" and plain ones "?".
      if (node.Tag() == "!") return Value::string(node.Scalar());
      return infer_scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      std::vector<Value> items;
      for (const auto& child : node) {
        KILN_ASSIGN_OR_RETURN(Value v, value_from_yaml(child));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case YAML::NodeType::Map:
      return invalid_argument("mappings are not accepted as values");
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return invalid_argument("an empty (null) value is not accepted; write \"\" for an empty string");
  }
  return invalid_argument("unsupported YAML value");
}

Result<std::vector<YamlEntry>> read_yaml_mapping(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return not_found("{}: no such config file", path);
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return invalid_argument("{}:{}:{}: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  std::vector<YamlEntry> entries;
  if (root.IsNull()) return entries;  // an empty file sets nothing
  if (!root.IsMap()) {
    return invalid_argument("{}: expected a mapping of key: value lines at the top level", path);
  }
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    int line = it->first.Mark().line + 1;
    if (!it->first.IsScalar()) {
      return invalid_argument("{}:{}: keys must be plain names", path, line);
    }
    std::string key = it->first.Scalar();
    if (!seen.insert(key).second) {
      return invalid_argument("{}:{}: key {} appears twice", path, line, key);
    }
    entries.push_back({key, it->second, line});
  }
  return entries;
}

}  // namespace kiln::config
