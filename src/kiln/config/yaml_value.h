// Conversion between yaml-cpp nodes and config values (internal to the config module, so
// that yaml-cpp stays out of the public headers).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "kiln/base/status.h"
#include "kiln/config/value.h"

namespace kiln::config {

// Plain scalars are typed by their spelling (infer_scalar), quoted ones are strings,
// sequences become lists. Nulls and mappings are rejected: every key has a typed value.
Result<Value> value_from_yaml(const YAML::Node& node);

// A YAML file whose top level is a mapping, as (key, node) pairs in file order, each with
// its line number for messages. Missing file, parse errors, duplicate keys and a
// non-mapping top level are errors that name the file (and line).
struct YamlEntry {
  std::string key;
  YAML::Node node;
  int line = 0;
};
Result<std::vector<YamlEntry>> read_yaml_mapping(const std::string& path);

}  // namespace kiln::config
