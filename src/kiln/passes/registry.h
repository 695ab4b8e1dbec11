// Passes by name, so tools and flags can build a pipeline from text:
//   kiln ir-opt model.ir --passes=dce,cse,simplify
//   --passes=default                     the compile pipeline's cleanups (compile_pipeline.h)
//   --passes="dce,fix(simplify,cse,dce)"  fix(...) is a fixed-point group
// A new pass adds one row to the table in registry.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/passes/pipeline.h"

namespace kiln::passes {

struct PassInfo {
  std::string_view name;     // Pass::name()
  std::string_view summary;  // one line, for --help
  std::function<std::unique_ptr<Pass>()> make;
};

// Every registered pass, in the order they are listed in registry.cc.
const std::vector<PassInfo>& registered_passes();
std::vector<std::string> registered_pass_names();

// A new instance of the pass called `name`; an unknown name is an error listing the known
// ones (with a "did you mean").
Result<std::unique_ptr<Pass>> make_pass(std::string_view name);

// A pipeline from a comma-separated spec: pass names, fix(a,b,...) groups and "default".
Result<Pipeline> pipeline_from_spec(std::string_view spec, PipelineOptions options = {});

}  // namespace kiln::passes
