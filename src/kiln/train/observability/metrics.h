// Per-step metrics: MaxText's console line and a JSON-lines file.
//
// Console (MaxText 2026-02's metric_logger line, then Kiln's additions after `loss`):
//   completed step: 12, seconds: 1.234, TFLOP/s/device: 0.011, Tokens/s/device: 829.876,
//   total_weights: 1024, loss: 7.123, lm_loss: 7.123, learning_rate: 3.000e-05,
//   grad_norm: 0.812, raw_grad_norm: 0.812, moe_lb_loss: 0.000000, MFU: 4.71%, data_wait: 0.000
// (one line; data_wait: seconds the step waited for its batch; on a mesh of several devices
// then ", collective_wait: 0.012"). metrics.jsonl: one JSON
// object per step with the fields of StepRecord under the same names; non-finite numbers
// are written as null (JSON has no NaN).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::train {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;           // the differentiated loss
  double lm_loss = 0;        // xent_sum / total_weights
  double total_weights = 0;  // counted target tokens
  double moe_lb_loss = 0;
  double z_loss = 0;
  double grad_norm = 0;      // after clipping
  double raw_grad_norm = 0;  // before clipping
  double param_norm = 0;     // after the update
  double learning_rate = 0;  // used by this step
  double step_time_s = 0;    // wall time since the previous step completed
  double data_wait_s = 0;    // part of it spent waiting for the batch (0 when prefetch keeps up)
  // Part of it a device spent blocked on collectives (exposed, not hidden by overlap): the
  // most of this process's devices. -1 on one device (no collectives: not written).
  double collective_wait_s = -1;
  double tokens_per_s_per_device = 0;
  double tflops_per_s_per_device = 0;
  double mfu = 0;            // tflops_per_s_per_device / the peak (a fraction); NaN above the peak (peaks.h)
  // This attempt's goodput so far (report/goodput.h): productive step time over wall time
  // since the trainer's set-up began. -1: not measured (not written).
  double goodput = -1;
  // skip_step_on_spikes dropped this step's update (JSON "skipped": true; absent otherwise).
  bool skipped = false;
  // MoE, every log_period steps (else empty): per MoE layer max and mean (token, expert)
  // pairs per expert and pairs dropped by the capacity, flattened [layers * 3]. Console:
  // ", expert_load (max/mean/dropped): [24/12/0, ...]"; JSON: "expert_load": [[24, 12, 0], ...].
  std::vector<double> expert_load;
  // dataset_type=hf: tokens (padding excluded) trained on so far, this step included, per
  // source of the stream ("data" alone, or each source of data_mixture); empty for other
  // data. JSON: "data_tokens": {"fineweb": 123456, "stack": 52910} (not on the console).
  std::vector<std::pair<std::string, int64_t>> data_tokens;
  // dataset_type=hf: the content hash of the step's global batch (BatchSource::batch_hash),
  // as 16 hex digits in JSON ("batch_hash"); empty for other data.
  std::string batch_hash;
};

std::string console_line(const StepRecord& r);
std::string json_line(const StepRecord& r);  // no trailing newline

// Appends JSON lines to a file, flushing every `flush_period` records and on close.
class JsonlWriter {
 public:
  JsonlWriter() = default;
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // What open_continuing found in an existing file.
  struct History {
    int64_t kept = 0;     // records of steps before first_step, kept in order
    int64_t dropped = 0;  // records of steps >= first_step (an attempt past the checkpoint), or repeated
    int64_t torn = 0;     // lines that are not a whole record (a write cut by kill -9, a corrupt line)
    double dropped_step_s = 0;  // the dropped records' step_time_s: work the new attempt does again
    std::string discarded_path;  // where dropped and torn lines went ("" when none)
  };
  // Continues a run's file: keeps every record of a step before `first_step` (the step the run
  // resumes at; 0 for a fresh start), drops the others and any torn line, then appends. A
  // file that ends in the kept records is cut there (the rest only ever appended to); else it
  // is rewritten through a temporary file and a rename, so a reader never sees a partial
  // file. Dropped lines are appended to PATH.discarded, never lost.
  Result<History> open_continuing(const std::string& path, int64_t flush_period, int64_t first_step);
  Status write(const StepRecord& r);
  Status flush();
  void close();
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  int64_t flush_period_ = 1;
  int64_t pending_ = 0;
};

}  // namespace kiln::train
