#include <cstdlib>
#include <string>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime {

Result<double> resolve_timeout_s(const Options& options) {
  if (options.timeout_s > 0) return options.timeout_s;
  const char* env = std::getenv("KILN_COLLECTIVE_TIMEOUT_S");
  if (env == nullptr || *env == '\0') return kDefaultCollectiveTimeoutS;
  char* end = nullptr;
  double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v > 0)) {
    return invalid_argument(
        "KILN_COLLECTIVE_TIMEOUT_S={}: expected a positive number of seconds (default {:g})", env,
        kDefaultCollectiveTimeoutS);
  }
  return v;
}

}  // namespace kiln::runtime
