#include "kiln/train/observability/peaks.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kiln::train {

namespace {
constexpr double kBf16OverF32 = 2.0;  // for an explicit peak only: the spec's ratio (cpu-machine.md)
}

double mfu_or_nan(double tflops, double peak_tflops) {
  if (!(peak_tflops > 0)) return 0.0;
  const double mfu = tflops / peak_tflops;
  return mfu > 1.0 ? std::numeric_limits<double>::quiet_NaN() : mfu;
}

std::string above_peak_message(int64_t step, double tflops, const Peaks& peaks) {
  return fmt::format(
      "MFU not logged from step {}: the step ran at {:.4g} TFLOP/s per device, above the {} peak of {:.4g} TFLOP/s "
      "({}), so the peak misses a faster unit of this device or the FLOP count is wrong; set hardware_peak_tflops to "
      "the device's real {} peak",
      step, tflops, peaks.bf16_compute ? "bf16" : "f32", peaks.compute_tflops(), peaks.source,
      peaks.bf16_compute ? "bf16" : "f32");
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
  p.memory_gbs = m->memory_gbs;
  p.source = m->source;
  p.log_line = "measured per device: " + m->description;
  return p;
}

}  // namespace kiln::train
