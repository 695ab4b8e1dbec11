// events.jsonl in the run directory: what happened to a run besides its steps, one JSON
// object per line, append-only across restarts (a run's history is never rewritten):
//   start              {step, attempt, config_diff, config_sources, peaks, num_devices, mesh}
//   compile            {step, census{...}, trace_s, compile_s, init_s}
//   eval               {step, eval_loss}
//   checkpoint_save    {step, path, blocked_s}
//   checkpoint_restore {step, path}
//   data_stall         {step, wait_s}         (a step that waited > kDataStallSeconds for data)
//   peak_exceeded      {step, tflops_per_s_per_device, peak_tflops, peak}  (once: MFU is not logged, peaks.h)
//   attribution        {step, step_s, mfu, rows[{name, seconds, percent, rate, mfu_without}]}
//   finish             {step}
// Every line also has "time" (Unix seconds) and "event". A torn last line (a kill during a
// write) is moved to events.jsonl.discarded when the file is opened again. report.html
// (report/) reads this file beside metrics.jsonl.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"
#include "kiln/config/config.h"

namespace kiln::train {

inline constexpr double kDataStallSeconds = 0.1;

class RunEvents {
 public:
  RunEvents() = default;
  ~RunEvents();
  RunEvents(const RunEvents&) = delete;
  RunEvents& operator=(const RunEvents&) = delete;

  // Opens `path` for appending (creating it); returns how many earlier start events it holds.
  Result<int64_t> open(const std::string& path);
  // Appends one event and flushes it to the OS (a kill afterwards loses nothing).
  Status write(const std::string& event, int64_t step, nlohmann::json fields = nlohmann::json::object());
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  void close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// The keys whose value does not come from base.yml, with their values as YAML text, and where
// each came from ("model", "config", "override").
nlohmann::json config_diff(const config::Config& config);
nlohmann::json config_sources(const config::Config& config);
// The compile census of the per-device program: kernels by kind, collectives by kind with
// bytes, planned memory per device.
nlohmann::json compile_census(const backend::CompileReport& report);

}  // namespace kiln::train
