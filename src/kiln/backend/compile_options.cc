#include "kiln/backend/backend.h"

namespace kiln::backend {

CompileOptions CompileOptions::from_config(const config::Config& config) {
  CompileOptions options;
  options.dump_dir = config.get_string("dump_ir");
  options.verify_each = config.get_bool("verify_each");
  options.remat_policy = config.get_string("remat_policy");
  return options;
}

}  // namespace kiln::backend
