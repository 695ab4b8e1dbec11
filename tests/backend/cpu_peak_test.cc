// The measured CPU peaks behind MFU: positive, bf16 at least f32, cached per CPU model and
// thread count in the cache folder, and a broken cache file is measured again and rewritten;
// what the Backend interface gives of them (measure_peaks, peaks_for) and of the attention
// kernels' tiles (kiln plan reads both through it).
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/backend/backend.h"
#include "kiln/backend/cpu/attention/attention_common.h"
#include "kiln/backend/cpu/gemm/cpu_peak.h"

namespace kiln::backend::cpu {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CpuPeak, MeasuresPositiveRatesWithBf16AtLeastF32) {
  const CpuPeak p = measure_cpu_peak(1, 0.02);
  EXPECT_GT(p.f32_tflops, 0.001);   // any core of the last decade does > 1 GFLOP/s
  EXPECT_LT(p.f32_tflops, 10.0);    // and no core does 10 TFLOP/s of FMAs
  EXPECT_GE(p.bf16_tflops, p.f32_tflops);
  EXPECT_EQ(p.threads, 1);
  EXPECT_FALSE(p.cpu_model.empty());
  EXPECT_FALSE(p.from_cache);
  EXPECT_NE(describe(p).find("TFLOP/s f32"), std::string::npos) << describe(p);
}

TEST(CpuPeak, CachedPerThreadCountAndRemeasuredWhenTheFileIsBroken) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_cpu_peak_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const CpuPeak first = cached_cpu_peak(1, dir.string());
  EXPECT_FALSE(first.from_cache);
  const CpuPeak again = cached_cpu_peak(1, dir.string());
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.f32_tflops, first.f32_tflops);
  EXPECT_EQ(again.bf16_tflops, first.bf16_tflops);
  EXPECT_NE(describe(again).find("cached"), std::string::npos);
  // Another thread count is another entry.
  EXPECT_FALSE(cached_cpu_peak(2, dir.string()).from_cache);
  nlohmann::json cache = nlohmann::json::parse(read(dir / "cpu_peak.json"));
  EXPECT_EQ(cache.size(), 2u) << cache.dump();
  // A torn or foreign file is measured again and replaced whole.
  std::ofstream(dir / "cpu_peak.json") << "{\"AMD";
  const CpuPeak remeasured = cached_cpu_peak(1, dir.string());
  EXPECT_FALSE(remeasured.from_cache);
  EXPECT_TRUE(nlohmann::json::parse(read(dir / "cpu_peak.json")).is_object());
  EXPECT_TRUE(cached_cpu_peak(1, dir.string()).from_cache);
  fs::remove_all(dir);
}

// The CPU backend's peaks are the cached measurement in the kernel cache's folder; the
// interpreter measures none of its own, and a run on it divides by the host CPU's.
TEST(CpuPeak, TheBackendInterfaceGivesTheCachedPeaksAndTheInterpreterRunsOnTheCpus) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_backend_peaks_" + std::to_string(getpid()));
  fs::remove_all(dir);
  ASSERT_EQ(setenv("KILN_CACHE_DIR", dir.c_str(), 1), 0);
  const Result<DevicePeaks> cpu = cpu_backend().measure_peaks(1);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  const CpuPeak cached = cached_cpu_peak(1, dir.string());
  EXPECT_TRUE(cached.from_cache);  // measure_peaks measured into $KILN_CACHE_DIR
  EXPECT_EQ(cpu->f32_tflops, cached.f32_tflops);
  EXPECT_EQ(cpu->bf16_tflops, cached.bf16_tflops);
  EXPECT_EQ(cpu->device, cached.cpu_model);
  EXPECT_EQ(cpu->source, "measured on 1 thread of " + cached.cpu_model);
  EXPECT_NE(cpu->description.find("TFLOP/s f32"), std::string::npos) << cpu->description;

  const Result<DevicePeaks> own = interpreter_backend().measure_peaks(1);
  EXPECT_EQ(own.status().code(), StatusCode::kUnimplemented);
  const Result<DevicePeaks> run = peaks_for(interpreter_backend(), 1);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->f32_tflops, cpu->f32_tflops);
  EXPECT_EQ(run->bf16_tflops, cpu->bf16_tflops);
  EXPECT_EQ(run->source, cpu->source);
  EXPECT_NE(run->description.find("cached"), std::string::npos) << run->description;  // measured once
  unsetenv("KILN_CACHE_DIR");
  fs::remove_all(dir);
}

TEST(CpuPeak, TheCpuBackendStatesItsAttentionTilesAndTheInterpreterNone) {
  EXPECT_EQ(cpu_backend().attention_tiles().queries, attention_detail::kBq);
  EXPECT_EQ(cpu_backend().attention_tiles().keys, attention_detail::kBk);
  EXPECT_EQ(interpreter_backend().attention_tiles().queries, 0);
  EXPECT_EQ(interpreter_backend().attention_tiles().keys, 0);
}

}  // namespace
}  // namespace kiln::backend::cpu
