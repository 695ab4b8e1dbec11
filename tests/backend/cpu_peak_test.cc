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
#include "kiln/backend/cpu/cpu_features.h"
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

// Each dtype's peak comes from a named unit, bf16 from the fastest this CPU lets Kiln use,
// and the memory bandwidth is measured beside them.
TEST(CpuPeak, NamesTheUnitOfEachPeakAndMeasuresTheBandwidth) {
  const CpuPeak p = measure_cpu_peak(1, 0.02);
  const CpuFeatures& cpu = cpu_features();
  EXPECT_EQ(p.isa, cpu.isa());
  EXPECT_TRUE(p.f32_unit == "AVX2 FMA" || p.f32_unit == "AVX-512 FMA") << p.f32_unit;
  if (cpu.amx_bf16) {
    EXPECT_EQ(p.bf16_unit, "AMX tdpbf16ps");
    EXPECT_GT(p.bf16_tflops, 4 * p.f32_tflops);  // a tile unit's peak is many times the FMA peak
  } else if (cpu.avx512_bf16) {
    EXPECT_TRUE(p.bf16_unit == "AVX-512 vdpbf16ps" || p.bf16_unit == "f32 FMA (no bf16 unit)") << p.bf16_unit;
  } else {
    EXPECT_EQ(p.bf16_unit, "f32 FMA (no bf16 unit)");
    EXPECT_EQ(p.bf16_tflops, p.f32_tflops);
    EXPECT_FALSE(p.bf16_instruction);
  }
  EXPECT_GT(p.memory_gbs, 0.5);    // any machine streams more than 0.5 GB/s on one thread
  EXPECT_LT(p.memory_gbs, 2000.0);
  const std::string text = describe(p);
  EXPECT_NE(text.find("(" + p.f32_unit + ")"), std::string::npos) << text;
  EXPECT_NE(text.find("(" + p.bf16_unit + ")"), std::string::npos) << text;
  EXPECT_NE(text.find("GB/s"), std::string::npos) << text;
}

// KILN_CPU_ISA caps the units (so fallbacks are testable on a machine with more) and never
// adds one; an unknown cap is one line naming the accepted values.
TEST(CpuFeatures, TheCapRemovesUnitsAndNeverAddsOne) {
  std::string error;
  const CpuFeatures all = detect_cpu_features("", &error);
  EXPECT_TRUE(error.empty()) << error;
  const CpuFeatures avx2 = detect_cpu_features("avx2", &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_FALSE(avx2.avx512f);
  EXPECT_FALSE(avx2.avx512_bf16);
  EXPECT_FALSE(avx2.amx_bf16);
  EXPECT_EQ(avx2.isa(), "avx2+fma");
  const CpuFeatures avx512 = detect_cpu_features("avx512", &error);
  EXPECT_EQ(avx512.avx512f, all.avx512f);
  EXPECT_EQ(avx512.avx512_bf16, all.avx512_bf16);
  EXPECT_FALSE(avx512.amx_bf16);
  EXPECT_FALSE(avx512.amx_note.empty());  // why no AMX: the CPU has none, or the cap
  const CpuFeatures amx = detect_cpu_features("amx", &error);
  EXPECT_EQ(amx.isa(), all.isa());
  EXPECT_EQ(all.amx_bf16, all.amx_note.empty());
  if (all.amx_bf16) {
    EXPECT_NE(all.isa().find("amx-bf16"), std::string::npos);
  }

  const CpuFeatures bad = detect_cpu_features("sse4", &error);
  EXPECT_EQ(error, "KILN_CPU_ISA=sse4 is not a unit cap; accepted: avx2, avx512, amx (or unset)");
  EXPECT_FALSE(bad.avx512f);
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
