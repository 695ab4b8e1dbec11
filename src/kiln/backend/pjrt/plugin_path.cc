#include "kiln/backend/pjrt/plugin_path.h"

#include <glob.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#ifndef KILN_DEFAULT_VENV
#error "KILN_DEFAULT_VENV (the checkout's .venv) is set by src/kiln/backend/pjrt/CMakeLists.txt"
#endif

namespace kiln::backend::pjrt {

namespace {

// A short name: the wheel's .so below site-packages, and how to get it when it is missing.
struct KnownPlugin {
  std::string_view name;
  std::string_view what;      // for the error: "XLA CPU plugin"
  std::string_view pattern;   // glob below lib/python3*/site-packages/
  std::string_view install;   // the command that installs it ({} = the venv)
};

// Wheels put their .so at these places; the CUDA wheel's package folder carries the CUDA
// major version (jax_plugins/xla_cuda13/), hence the glob.
constexpr KnownPlugin kKnownPlugins[] = {
    {"cpu", "XLA CPU plugin (xla-cpu-pjrt)", "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
     "bash scripts/setup_venv.sh python/requirements-pjrt.txt"},
    {"cuda", "XLA CUDA plugin (jax-cuda13-pjrt)", "jax_plugins/*/xla_cuda_plugin.so",
     "bash scripts/setup_venv.sh python/requirements-pjrt.txt"},
    {"tpu", "TPU plugin (libtpu)", "libtpu/libtpu.so", "bash scripts/setup_venv.sh python/requirements-tpu.txt"},
};

// Sorted matches of a glob pattern (none when nothing matches).
std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> paths;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return paths;
}

bool is_path(std::string_view name) {
  return name.find('/') != std::string_view::npos || (name.size() > 3 && name.substr(name.size() - 3) == ".so");
}

}  // namespace

std::string plugin_venv() {
  const char* env = std::getenv("KILN_VENV");
  if (env != nullptr && *env != '\0') return env;
  return KILN_DEFAULT_VENV;
}

Result<std::string> resolve_plugin(std::string_view name) {
  if (is_path(name)) {
    // A bare "libfoo.so" is left to dlopen's library search; a path must be there.
    struct stat st{};
    if (name.find('/') != std::string_view::npos && stat(std::string(name).c_str(), &st) != 0) {
      return not_found("pjrt_plugin={}: no such file", name);
    }
    return std::string(name);
  }
  const std::string venv = plugin_venv();
  for (const KnownPlugin& plugin : kKnownPlugins) {
    if (plugin.name != name) continue;
    std::vector<std::string> found = glob_paths(venv + "/lib/python3*/site-packages/" + std::string(plugin.pattern));
    if (!found.empty()) return found.front();
    return not_found("pjrt_plugin={}: no {} in {} (install it: {})", name, plugin.what, venv,
                     fmt::format(fmt::runtime(plugin.install), venv));
  }
  return invalid_argument("pjrt_plugin={}: unknown plugin; use cpu, cuda, tpu or the path of a PJRT plugin .so", name);
}

}  // namespace kiln::backend::pjrt
