#include "kiln/config/remat_policies.h"

namespace kiln::config {
namespace {

const std::set<std::string> kQkv = {"query_proj", "key_proj", "value_proj", "qkv_proj"};

std::set<std::string> with(std::set<std::string> base, std::initializer_list<const char*> more) {
  for (const char* m : more) base.insert(m);
  return base;
}

}  // namespace

const std::vector<RematPolicyDef>& remat_policies() {
  static const std::vector<RematPolicyDef> table = {
      {"none", {}, false},
      {"minimal_with_context", with(kQkv, {"out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo", "context"})},
      {"minimal", with(kQkv, {"out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo"})},
      {"save_dot_with_context_except_mlp", with(kQkv, {"out_proj", "context"})},
      {"save_dot_except_mlpwi", with(kQkv, {"out_proj", "mlpwo"})},
      {"save_dot_except_mlp", with(kQkv, {"out_proj"})},
      {"save_qkv_proj", kQkv},
      {"save_out_proj", {"out_proj"}},
      {"full", {}},
  };
  return table;
}

std::vector<std::string> remat_policy_names() {
  std::vector<std::string> names;
  for (const RematPolicyDef& p : remat_policies()) names.push_back(p.name);
  return names;
}

}  // namespace kiln::config
