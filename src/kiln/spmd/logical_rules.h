// MaxText's logical axis rules: each rule maps a logical axis name (`embed`, `mlp`,
// `activation_batch`, ...) to a list of mesh axes. For a value with one logical name per
// dimension, each dimension takes the FIRST rule for its name whose mesh axes are all
// still free in that value (not used by an earlier dimension); a name without a usable
// rule is replicated. Mesh axes of size 1 are dropped from the result (they split
// nothing), so a rule list written for a big mesh works unchanged on one device.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"

namespace kiln::spmd {

struct LogicalRule {
  std::string logical;
  std::vector<std::string> mesh_axes;
};

class LogicalRules {
 public:
  LogicalRules() = default;
  explicit LogicalRules(std::vector<LogicalRule> rules) : rules_(std::move(rules)) {}
  // From the `logical_axis_rules` key: a list of [name, [mesh axes]] (or [name, axis]).
  static Result<LogicalRules> from_config(const config::Config& config);

  const std::vector<LogicalRule>& rules() const { return rules_; }

  // The sharding of a value whose dimensions carry `logical` names ("" = no name) and
  // sizes `dims`. A dimension that its rule's axes do not divide evenly is left
  // replicated and the reason appended to `notes` (when given).
  ir::Sharding resolve(const std::vector<std::string>& logical, const std::vector<int64_t>& dims, const config::Mesh& mesh,
                       std::vector<std::string>* notes = nullptr) const;

 private:
  std::vector<LogicalRule> rules_;
};

}  // namespace kiln::spmd
