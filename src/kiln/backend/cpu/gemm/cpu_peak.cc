#include "kiln/backend/cpu/gemm/cpu_peak.h"

#include <immintrin.h>
#include <time.h>
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

namespace kiln::backend::cpu {

namespace {

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// GFLOP per CPU-second of one thread running `step` (12 vector ops, flops_per_iter FLOPs).
template <class V, class Step>
double loop_rate(V init, Step step, double flops_per_iter, double seconds) {
  // Named accumulators, not an array: an array lives on the stack and every op would go
  // through memory. Twelve independent chains fill two FMA pipes of 4-cycle latency.
  V a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init, a8 = init, a9 = init,
    a10 = init, a11 = init;
  const V b = init, c = init;
  double flops = 0;
  const double t0 = thread_cpu_seconds();
  double t = t0;
  while (t - t0 < seconds) {
    for (int i = 0; i < 100000; ++i) {
      a0 = step(a0, b, c), a1 = step(a1, b, c), a2 = step(a2, b, c), a3 = step(a3, b, c);
      a4 = step(a4, b, c), a5 = step(a5, b, c), a6 = step(a6, b, c), a7 = step(a7, b, c);
      a8 = step(a8, b, c), a9 = step(a9, b, c), a10 = step(a10, b, c), a11 = step(a11, b, c);
      asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
      asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    flops += 1e5 * flops_per_iter;
    t = thread_cpu_seconds();
  }
  return flops / (t - t0) / 1e9;
}

double fma256(double seconds) {
  return loop_rate(_mm256_set1_ps(1e-3f), [](__m256 x, __m256 b, __m256 c) { return _mm256_fmadd_ps(x, b, c); },
                   12 * 8 * 2.0, seconds);
}

#ifdef __AVX512F__
double fma512(double seconds) {
  return loop_rate(_mm512_set1_ps(1e-3f), [](__m512 x, __m512 b, __m512 c) { return _mm512_fmadd_ps(x, b, c); },
                   12 * 16 * 2.0, seconds);
}
#endif

#ifdef __AVX512BF16__
double dpbf16(double seconds) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
  return loop_rate(_mm512_set1_ps(0.0f), [ones](__m512 x, __m512, __m512) { return _mm512_dpbf16_ps(x, ones, ones); },
                   12 * 16 * 4.0, seconds);
}
#endif

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

// What the measurement can use, part of the cache key: a binary built for fewer instructions
// measures a lower peak.
std::string isa() {
  std::string s = "avx2";
#ifdef __AVX512F__
  s += "+avx512f";
#endif
#ifdef __AVX512BF16__
  s += "+avx512bf16";
#endif
  return s;
}

}  // namespace

CpuPeak measure_cpu_peak(int threads, double seconds_per_kind) {
  const auto start = std::chrono::steady_clock::now();
  CpuPeak p;
  p.threads = std::max(1, threads);
  p.cpu_model = cpu_model_name();
  double f32 = all_threads(fma256, p.threads, seconds_per_kind);
#ifdef __AVX512F__
  f32 = std::max(f32, all_threads(fma512, p.threads, seconds_per_kind));
#endif
  p.f32_tflops = f32 / 1e3;
  p.bf16_tflops = p.f32_tflops;
#ifdef __AVX512BF16__
  p.bf16_tflops = std::max(p.f32_tflops, all_threads(dpbf16, p.threads, seconds_per_kind) / 1e3);
  p.bf16_instruction = true;
#endif
  p.measure_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return p;
}

CpuPeak cached_cpu_peak(int threads, const std::string& cache_dir) {
  namespace fs = std::filesystem;
  threads = std::max(1, threads);
  const std::string key = fmt::format("{} | {} threads | {}", cpu_model_name(), threads, isa());
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
    if (e.value("f32_tflops", 0.0) > 0 && e.value("bf16_tflops", 0.0) > 0) {
      CpuPeak p;
      p.f32_tflops = e["f32_tflops"].get<double>();
      p.bf16_tflops = e["bf16_tflops"].get<double>();
      p.bf16_instruction = e.value("bf16_instruction", false);
      p.threads = threads;
      p.cpu_model = cpu_model_name();
      p.from_cache = true;
      return p;
    }
  }
  CpuPeak p = measure_cpu_peak(threads);
  cache[key] = {{"f32_tflops", p.f32_tflops}, {"bf16_tflops", p.bf16_tflops}, {"bf16_instruction", p.bf16_instruction}};
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
  return fmt::format("{:.3f} TFLOP/s f32, {:.3f} TFLOP/s bf16{} ({} on {} thread{} of {})", p.f32_tflops,
                     p.bf16_tflops, p.bf16_instruction ? "" : " (no bf16 dot-product instruction: the f32 peak)", how,
                     p.threads, p.threads == 1 ? "" : "s", p.cpu_model);
}

DevicePeaks device_peaks(const CpuPeak& p) {
  DevicePeaks d;
  d.f32_tflops = p.f32_tflops;
  d.bf16_tflops = p.bf16_tflops;
  d.device = p.cpu_model;
  d.source = fmt::format("measured on {} thread{} of {}", p.threads, p.threads == 1 ? "" : "s", p.cpu_model);
  d.description = describe(p);
  return d;
}

}  // namespace kiln::backend::cpu
