#include "kiln/backend/cpu/codegen/compile_cache.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "kiln/backend/cpu/codegen/codegen.h"
#include "kiln/base/hash.h"
#include "kiln/base/progress.h"

namespace kiln::backend::cpu {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFlags = "-std=c++20 -O3 -march=native -fopenmp -fPIC -shared -fno-math-errno";
// At most this many kernels per compiler process (one translation unit's compile time and
// memory stay small; a change recompiles only its chunk).
constexpr size_t kMaxKernelsPerChunk = 64;

std::string compiler() {
  const char* env = std::getenv("KILN_CXX");
  return env && *env ? env : "c++";
}

std::string run_capture(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

// What makes compiled code differ besides the source: compiler version and this CPU.
const std::string& toolchain_identity() {
  static const std::string id = [] {
    std::string cpu;
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0) cpu += line + "\n";
      if (line.empty() && !cpu.empty()) break;
    }
    return run_capture(compiler() + " --version 2>&1") + kFlags + cpu;
  }();
  return id;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compiles one chunk into `so` unless it is already there.
Status ensure_compiled(const std::string& source, const fs::path& so, bool* compiled) {
  *compiled = false;
  if (fs::exists(so)) return ok_status();
  std::string tag = fmt::format(".tmp{}_{}", getpid(), std::hash<std::thread::id>()(std::this_thread::get_id()) % 1000000);
  fs::path src = so;
  src.replace_extension(".cc");
  // Temporary names keep their extensions: the compiler picks the language from ".cc".
  fs::path stem = so.parent_path() / so.stem();
  fs::path src_tmp = stem.string() + tag + ".cc", so_tmp = stem.string() + tag + ".so", log = stem.string() + tag + ".log";
  {
    std::ofstream out(src_tmp);
    out << source;
    if (!out) return io_error("cannot write kernel source {}", src_tmp.string());
  }
  std::string command = fmt::format("{} {} -o {} {} > {} 2>&1", compiler(), kFlags, so_tmp.string(), src_tmp.string(),
                                    log.string());
  int rc = std::system(command.c_str());
  if (rc != 0) {
    std::string output = read_file(log);
    fs::rename(src_tmp, src);
    fs::remove(log);
    return internal_error("kernel compilation failed (exit {}): {}\n  source: {}\n{}", rc, command, src.string(), output);
  }
  std::error_code ec;
  fs::rename(so_tmp, so, ec);  // atomic; a concurrent run may have renamed an identical file
  fs::rename(src_tmp, src, ec);
  fs::remove(log, ec);
  *compiled = true;
  return ok_status();
}

}  // namespace

Result<KernelLibrary> build_kernels(const std::vector<KernelSource>& kernels, const std::string& cache_dir,
                                    const std::string& dump_dir) {
  KernelLibrary lib;
  if (kernels.empty()) return lib;
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec) return io_error("cannot create the kernel cache directory {}: {}", cache_dir, ec.message());
  // Equal chunks, a multiple of the cores in number: the build takes as long as its longest
  // chunk, so 80 kernels on 2 cores compile as 40 + 40, not 48 + 32, and 97 as 49 + 48, not
  // 48 + 48 and then 1 more alone.
  const size_t cores = std::max<size_t>(1, std::thread::hardware_concurrency());
  const size_t rounds = (kernels.size() + cores * kMaxKernelsPerChunk - 1) / (cores * kMaxKernelsPerChunk);
  const size_t per_chunk = (kernels.size() + rounds * cores - 1) / (rounds * cores);
  std::vector<std::string> chunks;
  for (size_t i = 0; i < kernels.size(); i += per_chunk) {
    std::string src = kernel_prelude();
    for (size_t j = i; j < std::min(kernels.size(), i + per_chunk); ++j) src += "\n" + kernels[j].source;
    chunks.push_back(std::move(src));
  }
  std::vector<fs::path> paths;
  for (const auto& src : chunks) {
    paths.push_back(fs::path(cache_dir) / ("kernels_" + hex64(fnv1a64(src, fnv1a64(toolchain_identity()))) + ".so"));
  }
  if (!dump_dir.empty()) {
    fs::create_directories(dump_dir, ec);
    for (size_t c = 0; c < chunks.size(); ++c) std::ofstream(fs::path(dump_dir) / paths[c].filename().replace_extension(".cc")) << chunks[c];
  }
  // Progress over the chunks the compiler has to build (a fully cached build prints nothing).
  int64_t missing = 0;
  for (const auto& p : paths) missing += !fs::exists(p);
  Progress progress(fmt::format("compile {} kernels", kernels.size()), missing,
                    Progress::Options{.mode = missing > 0 ? Progress::Mode::kAuto : Progress::Mode::kOff});
  // Compile missing chunks in parallel, one compiler process per core.
  std::vector<Status> statuses(chunks.size());
  std::vector<char> compiled(chunks.size(), 0);
  size_t workers = std::max<size_t>(1, std::min<size_t>(chunks.size(), std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  std::mutex mu;
  size_t next = 0;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      while (true) {
        size_t c;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next >= chunks.size()) return;
          c = next++;
        }
        bool did = false;
        statuses[c] = ensure_compiled(chunks[c], paths[c], &did);
        compiled[c] = did;
        if (did) progress.advance();
      }
    });
  }
  for (auto& t : threads) t.join();
  progress.finish();
  for (const Status& s : statuses) KILN_RETURN_IF_ERROR(s);
  lib.chunks_total = static_cast<int64_t>(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    lib.chunks_compiled += compiled[c];
    void* handle = dlopen(paths[c].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return internal_error("cannot load generated kernels {}: {}", paths[c].string(), dlerror());
    for (size_t j = c * per_chunk; j < std::min(kernels.size(), (c + 1) * per_chunk); ++j) {
      void* sym = dlsym(handle, kernels[j].name.c_str());
      if (!sym) return internal_error("generated library {} lacks {}", paths[c].string(), kernels[j].name);
      lib.symbols[kernels[j].name] = sym;
    }
  }
  return lib;
}

}  // namespace kiln::backend::cpu
