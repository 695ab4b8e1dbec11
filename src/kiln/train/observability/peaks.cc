#include "kiln/train/observability/peaks.h"

#include <fmt/format.h>

namespace kiln::train {

namespace {
constexpr double kBf16OverF32 = 2.0;  // for an explicit peak only: the spec's ratio (cpu-machine.md)
}

Result<Peaks> resolve_peaks(const config::Config& config,
                            const std::function<Result<backend::DevicePeaks>()>& measure) {
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
  Result<backend::DevicePeaks> m = measure();
  if (!m.ok()) {
    return Status(m.status().code(),
                  fmt::format("{} (hardware_peak_tflops=0 asks to measure them; set it to the device's peak in "
                              "TFLOP/s)",
                              m.status().message()));
  }
  p.f32_tflops = m->f32_tflops;
  p.bf16_tflops = m->bf16_tflops;
  p.source = m->source;
  p.log_line = "measured per device: " + m->description;
  return p;
}

}  // namespace kiln::train
