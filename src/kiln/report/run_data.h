// One run directory, read for the report page: metrics.jsonl (one record per step),
// events.jsonl (start, compile, eval, checkpoint_save/restore, data_stall, attribution,
// finish), profile/attribution.txt, checkpoints/<step>/manifest.json and tensorboard/.
// Every file may be missing, empty, or end in a torn line (a write in progress, a kill):
// reading never fails on content, it notes what it skipped or did not find in `notes`.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"

namespace kiln::report {

// The per-step scalars of metrics.jsonl the page plots, in this order.
inline constexpr std::array<const char*, 15> kMetricFields = {
    "loss",          "lm_loss",       "total_weights",     "moe_lb_loss",
    "z_loss",        "grad_norm",     "raw_grad_norm",     "param_norm",
    "learning_rate", "step_time_s",   "data_wait_s",       "collective_wait_s",
    "tokens_per_s_per_device",        "tflops_per_s_per_device", "mfu"};

// metrics.jsonl as columns: step[i] with column[f][i]; NaN where a record had null (a
// non-finite number) or lacked the field. Steps ascend: a record whose step is not above
// the last one (a restarted run that wrote a step again) replaces the records from there on.
struct Metrics {
  std::vector<int64_t> step;
  std::map<std::string, std::vector<double>> column;  // every kMetricFields entry, same length as step
  std::map<std::string, bool> present;                // a field some record had as a number
  size_t size() const { return step.size(); }
};

// "expert_load" ([[max, mean, dropped] per MoE layer]), logged every log_period steps.
struct ExpertLoad {
  std::vector<int64_t> step;
  std::vector<std::vector<std::array<double, 3>>> layers;  // [logged step][layer] = {max, mean, dropped}
};

// What reading a JSON-lines file found besides its records.
struct LinesRead {
  bool exists = false;
  int64_t records = 0;
  bool torn_last_line = false;         // the last line is not a whole record (skipped)
  std::vector<int64_t> bad_lines;      // 1-based numbers of other lines that are not records (skipped)
  int64_t replaced = 0;                // metrics records replaced by a later record of the same step
};

struct RunData {
  std::string dir;   // as given
  std::string name;  // the directory's name; render_report makes names unique among its runs

  Metrics metrics;
  ExpertLoad expert_load;
  // dataset_type=hf: the last record's "data_tokens", tokens trained on per source (step
  // data_tokens_step); empty without them.
  std::vector<std::pair<std::string, int64_t>> data_tokens;
  int64_t data_tokens_step = -1;
  LinesRead metrics_file, events_file;
  std::vector<nlohmann::json> events;  // every event object, in file order

  std::optional<std::string> attribution_text;  // profile/attribution.txt
  std::vector<int64_t> checkpoint_steps;        // checkpoints/<step>/manifest.json on disk, ascending
  bool has_tensorboard = false;

  // Sentences for the page: what is missing, skipped or unusual, e.g. "metrics.jsonl: the last
  // line is torn (a write in progress or a killed run); skipped".
  std::vector<std::string> notes;

  // The last event of this kind (that has `field`, when given), or nullptr.
  const nlohmann::json* last_event(const std::string& kind, const std::string& field = "") const;
  std::vector<const nlohmann::json*> events_of(const std::string& kind) const;
  // True when the run's last start or finish event is a finish (a restarted run is running
  // again until it writes another).
  bool finished() const;
};

// OK for a directory holding metrics.jsonl or events.jsonl; NotFound for a missing
// directory; InvalidArgument (naming run directories below it, if any) for any other.
Status check_run_dir(const std::string& dir);

// Reads a run directory (check_run_dir first). I/O errors on a file that exists are errors;
// content problems become notes.
Result<RunData> read_run(const std::string& dir);

// Whether events.jsonl ends in a finish event (see RunData::finished); false when missing.
bool run_finished(const std::string& dir);

}  // namespace kiln::report
