#include "kiln/backend/cpu/gemm/cpu_peak.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/backend/cpu/cpu_features.h"
#include "kiln/backend/cpu/gemm/peak_loops.h"

namespace kiln::backend::cpu {

namespace {

using Clock = std::chrono::steady_clock;

// The loop on `threads` threads at once: the sum of the per-thread rates (GFLOP/s).
double all_threads(double (*loop)(double), int threads, double seconds) {
  std::vector<double> rates(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { rates[i] = loop(seconds); });
  for (auto& t : pool) t.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

// A triad (a = b + s c) over arrays far larger than the caches, each of `threads` threads on
// its own slice; the best of 4 passes, in wall time (the bandwidth is shared, so CPU time
// would not measure it). STREAM's count: two arrays read and one written.
double triad_gbs(int threads) {
  constexpr size_t kFloats = size_t{24} << 20;  // 96 MiB per array, 288 MiB in all: past the caches
  std::vector<float> a(kFloats, 0.0f), b(kFloats, 1.0f), c(kFloats, 2.0f);
  const size_t slice = (kFloats + threads - 1) / threads;
  double best = 1e30;
  for (int pass = 0; pass < 4; ++pass) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        const size_t begin = std::min(kFloats, i * slice), end = std::min(kFloats, begin + slice);
        float* pa = a.data();
        const float* pb = b.data();
        const float* pc = c.data();
        for (size_t j = begin; j < end; ++j) pa[j] = pb[j] + 0.5f * pc[j];
      });
    }
    for (auto& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  asm volatile("" : : "r"(a.data()) : "memory");
  return 3.0 * kFloats * sizeof(float) / best / 1e9;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(' '));
        return name;
      }
    }
  }
  return "unknown CPU";
}

}  // namespace

CpuPeak measure_cpu_peak(int threads, double seconds_per_kind) {
  const auto start = Clock::now();
  const CpuFeatures& cpu = cpu_features();
  CpuPeak p;
  p.threads = std::max(1, threads);
  p.cpu_model = cpu_model_name();
  p.isa = cpu.isa();
  p.amx_note = cpu.amx_note;
  double f32 = all_threads(peak_loops::fma256, p.threads, seconds_per_kind);
  p.f32_unit = "AVX2 FMA";
  if (cpu.avx512f) {
    const double wide = all_threads(peak_loops::fma512, p.threads, seconds_per_kind);
    if (wide > f32) f32 = wide, p.f32_unit = "AVX-512 FMA";
  }
  p.f32_tflops = f32 / 1e3;
  p.bf16_tflops = p.f32_tflops;
  p.bf16_unit = "f32 FMA (no bf16 unit)";
  auto consider = [&](double (*loop)(double), const char* unit) {
    const double tflops = all_threads(loop, p.threads, seconds_per_kind) / 1e3;
    if (tflops > p.bf16_tflops) p.bf16_tflops = tflops, p.bf16_unit = unit, p.bf16_instruction = true;
  };
  if (cpu.avx512_bf16) consider(peak_loops::dpbf16, "AVX-512 vdpbf16ps");
  if (cpu.amx_bf16) consider(peak_loops::amx_dpbf16, "AMX tdpbf16ps");
  p.memory_gbs = triad_gbs(p.threads);
  p.measure_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return p;
}

CpuPeak cached_cpu_peak(int threads, const std::string& cache_dir) {
  namespace fs = std::filesystem;
  threads = std::max(1, threads);
  const CpuFeatures& cpu = cpu_features();
  const std::string key = fmt::format("{} | {} threads | {}", cpu_model_name(), threads, cpu.isa());
  const fs::path path = fs::path(cache_dir) / "cpu_peak.json";
  nlohmann::json cache = nlohmann::json::object();
  {
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      cache = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
      if (cache.is_discarded() || !cache.is_object()) cache = nlohmann::json::object();  // remeasured, rewritten
    }
  }
  if (cache.contains(key) && cache[key].is_object()) {
    const nlohmann::json& e = cache[key];
    // An entry from before the bandwidth or the units were recorded is measured again.
    if (e.value("f32_tflops", 0.0) > 0 && e.value("bf16_tflops", 0.0) > 0 && e.value("memory_gbs", 0.0) > 0 &&
        e.contains("bf16_unit")) {
      CpuPeak p;
      p.f32_tflops = e["f32_tflops"].get<double>();
      p.bf16_tflops = e["bf16_tflops"].get<double>();
      p.bf16_instruction = e.value("bf16_instruction", false);
      p.f32_unit = e.value("f32_unit", "");
      p.bf16_unit = e.value("bf16_unit", "");
      p.memory_gbs = e["memory_gbs"].get<double>();
      p.isa = cpu.isa();
      p.amx_note = cpu.amx_note;
      p.threads = threads;
      p.cpu_model = cpu_model_name();
      p.from_cache = true;
      return p;
    }
  }
  CpuPeak p = measure_cpu_peak(threads);
  cache[key] = {{"f32_tflops", p.f32_tflops}, {"bf16_tflops", p.bf16_tflops}, {"bf16_instruction", p.bf16_instruction},
                {"f32_unit", p.f32_unit},     {"bf16_unit", p.bf16_unit},     {"memory_gbs", p.memory_gbs}};
  // Written whole to a temporary file and renamed: a reader never sees half a file.
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  const fs::path tmp = path.string() + fmt::format(".tmp{}", getpid());
  {
    std::ofstream out(tmp);
    out << cache.dump(2) << "\n";
    if (!out) {
      fs::remove(tmp, ec);
      return p;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return p;
}

std::string describe(const CpuPeak& p) {
  std::string how = p.from_cache ? "measured earlier, cached" : fmt::format("measured in {:.2f} s", p.measure_seconds);
  std::string out = fmt::format("{:.3f} TFLOP/s f32 ({}), {:.3f} TFLOP/s bf16 ({}), memory {:.1f} GB/s ({} on {} thread{} of {})",
                                p.f32_tflops, p.f32_unit, p.bf16_tflops, p.bf16_unit, p.memory_gbs, how, p.threads,
                                p.threads == 1 ? "" : "s", p.cpu_model);
  // Only a CPU that has tiles Kiln does not use deserves the note.
  if (!p.amx_note.empty() && p.amx_note != "this CPU has no AMX tile units") out += "; " + p.amx_note;
  return out;
}

DevicePeaks device_peaks(const CpuPeak& p) {
  DevicePeaks d;
  d.f32_tflops = p.f32_tflops;
  d.bf16_tflops = p.bf16_tflops;
  d.memory_gbs = p.memory_gbs;
  d.device = p.cpu_model;
  d.source = fmt::format("measured on {} thread{} of {}", p.threads, p.threads == 1 ? "" : "s", p.cpu_model);
  d.description = describe(p);
  return d;
}

}  // namespace kiln::backend::cpu
