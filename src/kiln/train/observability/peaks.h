// The peaks MFU and the attribution table divide by: per device, per dtype.
//
// hardware_peak_tflops = 0 (the default) measures the device's f32 and bf16 peaks through the
// run's backend (backend::peaks_for: on the CPU, each dtype's fastest unit -- FMA for f32; AMX
// tiles, AVX-512 dot products or FMA for bf16 -- and a triad for the memory bandwidth, on the
// threads one device runs, under a second, cached per CPU model, thread count and units). A value
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
  double memory_gbs = 0;      // measured memory bandwidth; 0 with hardware_peak_tflops (not measured)
  bool bf16_compute = false;  // dtype=bfloat16: MFU is against the bf16 peak
  std::string source;         // how they were obtained, short: "measured on 2 threads of AMD EPYC"
  std::string log_line;       // the start-up log's description
  double compute_tflops() const { return bf16_compute ? bf16_tflops : f32_tflops; }
  double tflops(bool bf16) const { return bf16 ? bf16_tflops : f32_tflops; }
};

// MFU as a fraction of the peak: tflops / peak_tflops, or NaN where that exceeds 1. A rate
// above the peak is not a utilisation but a fault -- a peak that misses a faster unit of the
// device, or a wrong FLOP count -- so it is never logged as a number: NaN is "n/a" on the
// console, null in metrics.jsonl, absent from TensorBoard, and above_peak_message() says why.
double mfu_or_nan(double tflops, double peak_tflops);

// "MFU not logged from step 12: the step ran at 0.462 TFLOP/s per device, above the bf16 peak
// of 0.438 TFLOP/s (measured on ...): ..." -- one line naming the rate, the peak and the fix.
std::string above_peak_message(int64_t step, double tflops, const Peaks& peaks);

// From hardware_peak_tflops, or else `measure()`d (the trainer passes backend::peaks_for on
// its backend and threads per device; called only when needed). A failed measurement is an
// error that names hardware_peak_tflops.
Result<Peaks> resolve_peaks(const config::Config& config, const std::function<Result<backend::DevicePeaks>()>& measure);

}  // namespace kiln::train
