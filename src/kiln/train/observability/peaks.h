// The peaks MFU and the attribution table divide by: per device, per dtype.
//
// hardware_peak_tflops = 0 (the default) measures this CPU's f32 FMA and bf16 dot-product
// peaks on the threads one device runs (backend/cpu/gemm/cpu_peak.h; under a second, cached per
// CPU model and thread count). A value > 0 is the peak of the step's compute dtype (dtype);
// the other dtype's is derived from it with the ratio of the two (2, the Zen 4 spec's) for
// the attribution's per-GEMM rates.
#pragma once

#include <string>

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

// Measured (or cached) for `threads` threads per device, or from hardware_peak_tflops.
Peaks resolve_peaks(const config::Config& config, int threads_per_device);

}  // namespace kiln::train
