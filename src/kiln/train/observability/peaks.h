// The peaks MFU and the attribution table divide by: per device, per dtype.
//
// hardware_peak_tflops = 0 (the default) measures the device's f32 and bf16 peaks through the
// run's backend (backend::peaks_for: on the CPU, f32 FMA and bf16 dot-product loops on the
// threads one device runs, under a second, cached per CPU model and thread count). A value
// > 0 is the peak of the step's compute dtype (dtype); the other dtype's is derived from it
// with the ratio of the two (2, the Zen 4 spec's) for the attribution's per-GEMM rates.
#pragma once

#include <functional>
#include <string>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/config/config.h"

namespace kiln::train {

struct Peaks {
  double f32_tflops = 0;
  double bf16_tflops = 0;
  bool bf16_compute = false;  // dtype=bfloat16: MFU is against the bf16 peak
  std::string source;         // how they were obtained, short: "measured on 2 threads of AMD EPYC"
  std::string log_line;       // the start-up log's description
  double compute_tflops() const { return bf16_compute ? bf16_tflops : f32_tflops; }
  double tflops(bool bf16) const { return bf16 ? bf16_tflops : f32_tflops; }
};

// From hardware_peak_tflops, or else `measure()`d (the trainer passes backend::peaks_for on
// its backend and threads per device; called only when needed). A failed measurement is an
// error that names hardware_peak_tflops.
Result<Peaks> resolve_peaks(const config::Config& config, const std::function<Result<backend::DevicePeaks>()>& measure);

}  // namespace kiln::train
