#include "kiln/backend/backend.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::backend {

std::string default_cache_dir() {
  if (const char* env = std::getenv("KILN_CACHE_DIR"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kiln";
  return ".cache/kiln";
}

CompileOptions CompileOptions::from_config(const config::Config& config) {
  CompileOptions options;
  options.dump_dir = config.get_string("dump_ir");
  options.verify_each = config.get_bool("verify_each");
  options.remat_policy = config.get_string("remat_policy");
  options.grad_reduce_dtype = config.get_string("grad_reduce_dtype");
  return options;
}

Result<std::unique_ptr<ir::Module>> run_compile_pipeline(const ir::Module& source, const CompileOptions& options,
                                                         const passes::BackendPolicy& policy, CompileReport& report) {
  report.instructions_before = source.instruction_count();
  std::unique_ptr<ir::Module> module = source.clone();
  passes::PipelineOptions popts;
  popts.verify_each = options.verify_each;
  if (!options.dump_dir.empty()) popts.dump_ir = options.dump_dir + "/passes";
  KILN_ASSIGN_OR_RETURN(passes::Pipeline pipeline, passes::compile_pipeline(options.choices(), policy, std::move(popts)));
  KILN_RETURN_IF_ERROR(pipeline
                           .run(module,
                                [&](std::string_view checkpoint, const ir::Module& m) {
                                  if (checkpoint == passes::kCleanedCheckpoint) report.collectives = ops::count_collectives(m);
                                })
                           .status());
  return module;
}

}  // namespace kiln::backend
