#include "kiln/train/observability/peaks.h"

#include <fmt/format.h>

#include "kiln/backend/cpu/codegen/compile_cache.h"
#include "kiln/backend/cpu/gemm/cpu_peak.h"

namespace kiln::train {

namespace {
constexpr double kBf16OverF32 = 2.0;  // for an explicit peak only: the spec's ratio (cpu-machine.md)
}

Peaks resolve_peaks(const config::Config& config, int threads_per_device) {
  Peaks p;
  p.bf16_compute = config.get_string("dtype") == "bfloat16";
  const double configured = config.get_float("hardware_peak_tflops");
  if (configured > 0) {
    p.f32_tflops = p.bf16_compute ? configured / kBf16OverF32 : configured;
    p.bf16_tflops = p.bf16_compute ? configured : configured * kBf16OverF32;
    p.source = fmt::format("hardware_peak_tflops={:g}", configured);
    p.log_line = fmt::format("hardware_peak_tflops={:g} ({} peak; the {} peak taken as {} of it)", configured,
                             p.bf16_compute ? "bf16" : "f32", p.bf16_compute ? "f32" : "bf16",
                             p.bf16_compute ? "1/2" : "2x");
    return p;
  }
  const backend::cpu::CpuPeak m =
      backend::cpu::cached_cpu_peak(threads_per_device, backend::cpu::default_cache_dir());
  p.f32_tflops = m.f32_tflops;
  p.bf16_tflops = m.bf16_tflops;
  p.source = fmt::format("measured on {} thread{} of {}", m.threads, m.threads == 1 ? "" : "s", m.cpu_model);
  p.log_line = "measured per device: " + backend::cpu::describe(m);
  return p;
}

}  // namespace kiln::train
