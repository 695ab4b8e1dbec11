#include "kiln/passes/registry.h"

#include <fmt/format.h>

#include "kiln/base/strings.h"
#include "kiln/passes/all_gather_combiner.h"
#include "kiln/passes/all_reduce_combiner.h"
#include "kiln/passes/async_collectives.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/fusion.h"
#include "kiln/passes/multi_output_fusion.h"
#include "kiln/passes/product_result_dtype.h"
#include "kiln/passes/reduce_scatter_combiner.h"
#include "kiln/passes/reduce_scatter_reassociate.h"
#include "kiln/passes/regather.h"
#include "kiln/passes/remat.h"
#include "kiln/passes/simplify.h"

namespace kiln::passes {

const std::vector<PassInfo>& registered_passes() {
  static const std::vector<PassInfo> passes = {
      {"dce", "removes unused instructions and uncalled computations", [] { return std::make_unique<DcePass>(); }},
      {"cse", "merges instructions that compute the same value", [] { return std::make_unique<CsePass>(); }},
      {"simplify", "algebraic identities, transpose/reshape folding, constant folding",
       [] { return std::make_unique<SimplifyPass>(); }},
      {"fusion", "groups elementwise ops into loop fusions (one generated kernel each)",
       [] { return std::make_unique<FusionPass>(); }},
      {"multi_output_fusion", "merges a loop fusion into its consumer when others also read it (one kernel, several outputs)",
       [] { return std::make_unique<MultiOutputFusionPass>(); }},
      {"remat", "recomputes decoder-layer activations in the backward pass (remat_policy=full; compile uses the config's)",
       [] { return std::make_unique<RematPass>(RematPolicy::from_name("full").value()); }},
      {"all_reduce_combiner", "merges independent small all-reduces over the same devices into one",
       [] { return std::make_unique<AllReduceCombinerPass>(); }},
      {"all_gather_combiner", "merges independent small all-gathers over the same devices needed at one compute step",
       [] { return std::make_unique<AllGatherCombinerPass>(); }},
      {"reduce_scatter_combiner", "merges independent small reduce-scatters over the same devices ready at one compute step",
       [] { return std::make_unique<ReduceScatterCombinerPass>(); }},
      {"reduce_scatter_reassociate", "a sum of reduce-scatters of one kind becomes one reduce-scatter of the sum",
       [] { return std::make_unique<ReduceScatterReassociatePass>(); }},
      {"regather", "gathers sharded weights again in the backward pass instead of keeping the forward's copy",
       [] { return std::make_unique<RegatherPass>(); }},
      {"product_result_dtype", "a bf16 product widened by a convert writes the wide result itself (one rounding less)",
       [] { return std::make_unique<ProductResultDtypePass>(); }},
      {"async_collectives", "turns each all-gather, reduce-scatter and all-reduce into a start/done pair",
       [] { return std::make_unique<AsyncCollectivesPass>(); }},
  };
  return passes;
}

std::vector<std::string> registered_pass_names() {
  std::vector<std::string> names;
  for (const PassInfo& info : registered_passes()) names.emplace_back(info.name);
  return names;
}

Result<std::unique_ptr<Pass>> make_pass(std::string_view name) {
  for (const PassInfo& info : registered_passes()) {
    if (info.name == name) return info.make();
  }
  std::vector<std::string> names = registered_pass_names();
  std::string suggestion = closest_match(name, names);
  return invalid_argument("unknown pass '{}'{}; known passes: {} (and 'default', 'fix(a,b,...)')", name,
                          suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion),
                          fmt::join(names, ", "));
}

namespace {

// Splits "a, fix(b,c), d" at top-level commas.
Result<std::vector<std::string>> split_top_level(std::string_view spec) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : spec) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) return invalid_argument("unbalanced ')' in pass list '{}'", spec);
    if (c == ',' && depth == 0) {
      items.emplace_back(trim(current));
      current.clear();
      continue;
    }
    current += c;
  }
  if (depth != 0) return invalid_argument("unbalanced '(' in pass list '{}'", spec);
  items.emplace_back(trim(current));
  return items;
}

}  // namespace

Result<Pipeline> pipeline_from_spec(std::string_view spec, PipelineOptions options) {
  if (trim(spec) == "default") return default_pipeline(std::move(options));
  Pipeline p(std::move(options));
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> items, split_top_level(spec));
  for (const std::string& item : items) {
    if (item.empty()) return invalid_argument("empty pass name in pass list '{}'", spec);
    if (starts_with(item, "fix(") && item.back() == ')') {
      std::string inner = item.substr(4, item.size() - 5);
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> names, split_top_level(inner));
      std::vector<std::unique_ptr<Pass>> group;
      for (const std::string& name : names) {
        if (name.find('(') != std::string::npos) return invalid_argument("fix(...) groups do not nest: '{}'", item);
        KILN_ASSIGN_OR_RETURN(std::unique_ptr<Pass> pass, make_pass(name));
        group.push_back(std::move(pass));
      }
      p.add_fixed_point(inner, std::move(group));
      continue;
    }
    if (item == "default") return invalid_argument("'default' is a whole pipeline; it cannot be combined with other passes");
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Pass> pass, make_pass(item));
    p.add(std::move(pass));
  }
  return p;
}

}  // namespace kiln::passes
