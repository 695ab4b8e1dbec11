// MaxText's remat_policy values and what each saves: the one list of them. The config
// validation accepts exactly these names, and passes/remat.h recomputes every decoder-layer
// activation whose checkpoint name (the last dotted part of its name) a policy does not save.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace kiln::config {

struct RematPolicyDef {
  std::string name;
  std::set<std::string> saved;  // checkpoint names kept from the forward pass
  bool recomputes = true;       // false for "none": everything is kept
};

const std::vector<RematPolicyDef>& remat_policies();
std::vector<std::string> remat_policy_names();

}  // namespace kiln::config
