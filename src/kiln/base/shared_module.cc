#include "kiln/base/shared_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace kiln {

namespace {

std::vector<std::string> candidates(const std::string& file_name, const char* env_var, const std::string& build_path) {
  if (const char* env = std::getenv(env_var); env && *env) return {env};
  std::vector<std::string> out;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    const std::filesystem::path dir = std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path();
    out.push_back((dir / file_name).string());
    out.push_back((dir / "lib" / file_name).string());
  }
  if (!build_path.empty()) out.push_back(build_path);
  return out;
}

}  // namespace

ModuleSymbol load_module_symbol(const std::string& file_name, const char* env_var, const std::string& build_path,
                                const char* symbol) {
  ModuleSymbol m;
  std::vector<std::string> tried;
  for (const std::string& path : candidates(file_name, env_var, build_path)) {
    if (!std::filesystem::exists(path)) {
      tried.push_back(path);
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      m.error = fmt::format("{} does not load: {}", path, dlerror());
      return m;
    }
    m.address = dlsym(handle, symbol);
    if (!m.address) m.error = fmt::format("{} has no {} (a module of another Kiln version?)", path, symbol);
    return m;
  }
  m.error = fmt::format("no {} at {}", file_name, fmt::join(tried, ", "));
  return m;
}

}  // namespace kiln
