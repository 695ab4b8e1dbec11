#include "kiln/spmd/logical_rules.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include <fmt/ranges.h>

namespace kiln::spmd {

Result<LogicalRules> LogicalRules::from_config(const config::Config& config) {
  std::vector<LogicalRule> rules;
  const auto& list = config.get_list("logical_axis_rules");
  for (size_t i = 0; i < list.size(); ++i) {
    const config::Value& item = list[i];
    auto bad = [&] {
      return invalid_argument("logical_axis_rules[{}]: expected [logical_name, [mesh_axis, ...]], got {}", i,
                              item.to_yaml());
    };
    if (!item.is_list() || item.as_list().size() != 2 || item.as_list()[0].kind() != config::ValueKind::kString) return bad();
    LogicalRule rule{item.as_list()[0].as_string(), {}};
    const config::Value& axes = item.as_list()[1];
    if (axes.kind() == config::ValueKind::kString) {
      rule.mesh_axes.push_back(axes.as_string());
    } else if (axes.is_list()) {
      for (const config::Value& a : axes.as_list()) {
        if (a.kind() != config::ValueKind::kString) return bad();
        rule.mesh_axes.push_back(a.as_string());
      }
    } else {
      return bad();
    }
    for (const std::string& a : rule.mesh_axes) {
      const auto& known = config::known_mesh_axes();
      if (std::find(known.begin(), known.end(), a) == known.end()) {
        return invalid_argument("logical_axis_rules[{}]: unknown mesh axis '{}' (mesh axes: {})", i, a,
                                fmt::join(known, ", "));
      }
    }
    rules.push_back(std::move(rule));
  }
  return LogicalRules(std::move(rules));
}

ir::Sharding LogicalRules::resolve(const std::vector<std::string>& logical, const std::vector<int64_t>& dims,
                                   const config::Mesh& mesh, std::vector<std::string>* notes) const {
  ir::Sharding sharding;
  sharding.dims.resize(dims.size());
  std::set<std::string> used;
  for (size_t d = 0; d < dims.size() && d < logical.size(); ++d) {
    if (logical[d].empty()) continue;
    for (const LogicalRule& rule : rules_) {
      if (rule.logical != logical[d]) continue;
      bool free = std::none_of(rule.mesh_axes.begin(), rule.mesh_axes.end(),
                               [&](const std::string& a) { return used.count(a) > 0; });
      if (!free) continue;
      std::vector<std::string> axes;
      for (const std::string& a : rule.mesh_axes) {
        if (mesh.size(a) > 1) axes.push_back(a);
      }
      for (const std::string& a : rule.mesh_axes) used.insert(a);
      if (dims[d] % mesh.size(axes) != 0) {
        if (notes) {
          notes->push_back(fmt::format("dimension {} ({}, size {}) is not divisible by {} devices over [{}]: replicated",
                                       d, logical[d], dims[d], mesh.size(axes), fmt::join(axes, ",")));
        }
        axes.clear();
      }
      sharding.dims[d] = std::move(axes);
      break;
    }
  }
  return sharding;
}

}  // namespace kiln::spmd
