// "Where did the MFU go": the measured step time split into what it was spent on, summing
// to 100%, with the rate each kind of work achieved and the MFU the run would have without
// each loss.
//
// FLOP convention: MFU is MaxText's (train/observability/flops.h, the 2026-02 formula Kiln logs): model
// TFLOPs per device per step / step time / the peak of the step's compute dtype. Kernel rates
// use the op registry's cost (ops::cost_of: 2 per multiply-add), counted from the
// instructions run. Peaks (train/observability/peaks.h): measured on this CPU unless hardware_peak_tflops
// sets them; each GEMM against its own dtype's peak, grouped matmuls and attention against the
// compute dtype's, and the measured memory bandwidth (Peaks::memory_gbs) for the memory-bound
// kernels' rate: each class against its own roofline.
//
// Every instruction row is the mean over the process's devices (trace.h StepTotals): on
// several devices a collective row is mostly one device's wait for the slowest, which falls
// on whichever device was ahead.
// Rows: gemm, grouped matmul, attention, fused elementwise, other kernels (native data
// movement and reductions, reference-evaluation fallbacks), exposed collectives by kind
// (there is no overlap yet, so all collective time is exposed), rematerialization (values
// whose name carries ".remat"; their time is taken out of their kernel row), data wait,
// checkpoint stall, host overhead (measured: the gaps between one instruction's end and the
// next one's start on a device, within the step: the executable's loop, frees, collective
// progress), outside the program (the remainder: the step's wall time not inside any of the
// above: argument conversion before the first kernel and after the last, logging).
// "Loss" of a row: its time minus the time its model FLOPs need at peak (gemm, grouped
// matmul, attention), or all of its time (every other row). "MFU without" = MaxText TFLOPs
// / (step time - loss) / peak.
#pragma once

#include <string>
#include <vector>

#include "kiln/train/observability/peaks.h"
#include "kiln/train/observability/trace.h"

namespace kiln::train {

struct AttributionRow {
  std::string name;
  double seconds = 0;   // per step
  double percent = 0;   // of the step's wall time
  std::string rate;     // achieved vs peak, where it applies
  double mfu_without = 0;
};

struct Attribution {
  std::vector<AttributionRow> rows;
  double step_s = 0;          // mean measured wall time per step
  double mfu = 0;             // model TFLOPs / step_s / peak
  double percent_sum = 0;
  double gemm_gflops = 0;     // achieved GEMM rate (GFLOP/s)
  // Lines printed under the table: a kernel row above 100% of its peak means the peak is
  // below this machine's (bench/cpu_peak_bench measures it), not that the kernels beat it.
  std::vector<std::string> notes;
};

// model_tflops: MaxText's per-device-per-step TFLOPs.
Attribution attribute(const StepTotals& totals, double model_tflops, const Peaks& peaks);
// The table as printed at the end of a run (several lines, no trailing newline).
std::string attribution_table(const Attribution& a, const StepTotals& totals, const Peaks& peaks);
// The GEMM shapes seen, one JSON object per line: {"dtype","batch","m","n","k","trans_a",
// "trans_b","count_per_step","seconds_per_step"} (means over the observed steps), read by
// bench/gemm_shapes_bench to time the same GEMMs with oneDNN alone.
std::string gemm_shapes_jsonl(const StepTotals& totals);

}  // namespace kiln::train
