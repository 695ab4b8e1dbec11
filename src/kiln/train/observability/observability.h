// The trainer's observability sinks behind a few calls: TensorBoard event files, the
// Chrome trace of the profiled steps, and the end-of-run MFU attribution table.
//
//   enable_tensorboard=true   {output_dir}/tensorboard/events.out.tfevents.* (flushed every log_period)
//   profiler=trace            {output_dir}/profile/trace.json for steps
//                             [skip_first_n_steps_for_profiler, + profiler_steps)
//   report=true               at the end of the run: the attribution table (attribution.h) over
//                             the profiled steps (profiler=trace) or every step after the first
//                             skip_first_n_steps_for_profiler; also printed with profiler=trace.
//                             {output_dir}/profile/attribution.txt and gemm_shapes.jsonl
//
// The trainer calls: step_begin -> host spans (data wait, checkpoint) -> step_end, eval(),
// finish(). Everything is a no-op for the parts that are off.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kiln/config/config.h"
#include "kiln/train/observability/attribution.h"
#include "kiln/train/observability/metrics.h"
#include "kiln/train/observability/tensorboard.h"
#include "kiln/train/observability/trace.h"

namespace kiln::train {

// The scalars of one step's TensorBoard event: every number of the console line (and
// z_loss, param_norm from metrics.jsonl) under MaxText's tags where MaxText has the metric.
std::vector<Scalar> tensorboard_scalars(const StepRecord& r);

class RunObserver {
 public:
  struct Options {
    std::string output_dir;
    double model_tflops = 0;  // MaxText TFLOPs per device per step
    Peaks peaks;
    std::function<void(const std::string&)> print;  // console lines
    int64_t first_step = 0;  // the step this attempt starts at (a restored checkpoint's)
  };
  static Result<std::unique_ptr<RunObserver>> create(const config::Config& config, Options options);

  // Hook the trainer hands to its executor (nullptr when no profile or report is wanted).
  backend::InstructionObserver* instruction_observer() { return recorder_.get(); }

  void step_begin(int64_t step);
  // A host span of the current step: category "data" (data wait), "checkpoint" or "host".
  void span(const std::string& name, const char* category, int64_t begin_ns, int64_t end_ns);
  // After the step's record is complete (begin/end: the step's wall-clock interval).
  Status step_end(const StepRecord& r, int64_t begin_ns, int64_t end_ns);
  Status eval(int64_t step, double eval_loss);
  // Flushes TensorBoard, writes the trace if its steps did not finish yet, prints the table.
  Status finish();
  // The attribution finish() computed (none when no step was observed).
  const std::optional<Attribution>& attribution() const { return attribution_; }

  const std::string& trace_path() const { return trace_path_; }
  const std::string& tensorboard_path() const { return tensorboard_.path(); }

  // steady_clock nanoseconds, the clock of every span.
  static int64_t now_ns() { return TraceRecorder::now_ns(); }

 private:
  bool observed(int64_t step) const;
  Status write_tensorboard(const StepRecord& r);
  Status write_profile();

  Options options_;
  TensorBoardWriter tensorboard_;
  std::optional<Attribution> attribution_;
  int64_t log_period_ = 1, pending_ = 0;
  std::unique_ptr<TraceRecorder> recorder_;
  bool trace_ = false, report_ = false, profile_written_ = false;
  int64_t first_step_ = 0, last_step_ = -1;  // observed steps [first, last]; last -1: to the end
  int64_t current_step_ = -1;
  bool in_step_ = false;  // between step_begin and step_end
  std::string trace_path_;
};

}  // namespace kiln::train
