// Loads libkiln_parquet.so (parquet_reader.h) once and opens Parquet files through it.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/data/sources/parquet_reader.h"

namespace kiln::data {

namespace {

struct Module {
  ParquetOpen open = nullptr;
  std::string error;  // why open is null
};

// Where the module may be, in order of precedence ($KILN_PARQUET_MODULE alone when set).
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("KILN_PARQUET_MODULE"); env && *env) return {env};
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    const std::filesystem::path dir = std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path();
    out.push_back((dir / "libkiln_parquet.so").string());
    out.push_back((dir / "lib" / "libkiln_parquet.so").string());
  }
#ifdef KILN_PARQUET_MODULE_PATH
  out.push_back(KILN_PARQUET_MODULE_PATH);
#endif
  return out;
}

Module load() {
  Module m;
  std::vector<std::string> tried;
  for (const std::string& path : candidates()) {
    if (!std::filesystem::exists(path)) {
      tried.push_back(path);
      continue;
    }
    // Never closed: the readers it makes keep their code in it.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      m.error = fmt::format("{} does not load: {}", path, dlerror());
      return m;
    }
    m.open = reinterpret_cast<ParquetOpen>(dlsym(handle, kParquetEntry));
    if (!m.open) m.error = fmt::format("{} has no {} (a module of another Kiln version?)", path, kParquetEntry);
    return m;
  }
  m.error = fmt::format("no libkiln_parquet.so at {}", fmt::join(tried, ", "));
  return m;
}

}  // namespace

Result<std::unique_ptr<DocumentReader>> open_parquet_reader(const std::string& path, const std::string& column) {
  static const Module module = load();
  if (!module.open) {
    return unimplemented("{}: reading Parquet needs Kiln's Parquet module (Apache Arrow's reader), and {}; set "
                         "KILN_PARQUET_MODULE to it, or use JSONL files (.jsonl, .jsonl.gz, .jsonl.zst), which need "
                         "none",
                         path, module.error);
  }
  Result<std::unique_ptr<DocumentReader>> out = internal_error("{}: the Parquet module returned nothing", path);
  module.open(path, column, out);
  return out;
}

}  // namespace kiln::data
