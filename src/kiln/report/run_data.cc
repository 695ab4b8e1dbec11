#include "kiln/report/run_data.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::report {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The whole file, or nullopt when it does not exist.
Result<std::optional<std::string>> read_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::optional<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open {}: {}", path.string(), std::strerror(errno));
  std::ostringstream all;
  all << in.rdbuf();
  if (in.bad()) return io_error("cannot read {}", path.string());
  return std::optional<std::string>(all.str());
}

// Calls `record` for each line that holds a JSON object accepted by `accept`; counts the rest.
// A last line without its newline still counts when it parses (the newline may simply not
// have reached the file yet); when it does not, it is a torn line, not a bad one.
LinesRead for_each_record(const std::string& text, const std::function<bool(nlohmann::json&)>& record) {
  LinesRead r;
  r.exists = true;
  int64_t number = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = text.find('\n', pos);
    const bool whole = nl != std::string::npos;
    std::string_view line = std::string_view(text).substr(pos, (whole ? nl : text.size()) - pos);
    pos = whole ? nl + 1 : text.size();
    ++number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && record(j)) {
      ++r.records;
    } else if (!whole) {
      r.torn_last_line = true;
    } else {
      r.bad_lines.push_back(number);
    }
  }
  return r;
}

double number_or_nan(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return kNaN;
  return it->get<double>();
}

bool is_step(const nlohmann::json& j) {
  auto it = j.find("step");
  return it != j.end() && (it->is_number_integer() || it->is_number_unsigned());
}

// Cuts the records from index i on (a restarted run writes those steps again).
void truncate_metrics(Metrics& m, size_t i) {
  m.step.resize(i);
  for (auto& [name, values] : m.column) values.resize(i);
}

void truncate_expert_load(ExpertLoad& e, int64_t from_step) {
  size_t i = std::lower_bound(e.step.begin(), e.step.end(), from_step) - e.step.begin();
  e.step.resize(i);
  e.layers.resize(i);
}

bool add_metrics_record(RunData& run, nlohmann::json& j) {
  if (!is_step(j)) return false;
  Metrics& m = run.metrics;
  const int64_t step = j["step"].get<int64_t>();
  if (!m.step.empty() && step <= m.step.back()) {
    const size_t i = std::lower_bound(m.step.begin(), m.step.end(), step) - m.step.begin();
    run.metrics_file.replaced += static_cast<int64_t>(m.step.size() - i);
    truncate_metrics(m, i);
    truncate_expert_load(run.expert_load, step);
  }
  m.step.push_back(step);
  for (const char* field : kMetricFields) {
    const double v = number_or_nan(j, field);
    m.column[field].push_back(v);
    if (j.contains(field) && (j[field].is_number() || j[field].is_null())) m.present[field] = true;
  }
  auto tokens = j.find("data_tokens");
  if (tokens != j.end() && tokens->is_object()) {
    run.data_tokens.clear();
    for (auto it = tokens->begin(); it != tokens->end(); ++it) {
      if (it.value().is_number()) run.data_tokens.emplace_back(it.key(), it.value().get<int64_t>());
    }
    run.data_tokens_step = step;
  }
  auto load = j.find("expert_load");
  if (load != j.end() && load->is_array() && !load->empty()) {
    std::vector<std::array<double, 3>> layers;
    for (const nlohmann::json& layer : *load) {
      std::array<double, 3> v = {kNaN, kNaN, kNaN};
      if (layer.is_array()) {
        for (size_t k = 0; k < 3 && k < layer.size(); ++k) v[k] = layer[k].is_number() ? layer[k].get<double>() : kNaN;
      }
      layers.push_back(v);
    }
    run.expert_load.step.push_back(step);
    run.expert_load.layers.push_back(std::move(layers));
  }
  return true;
}

std::string line_list(const std::vector<int64_t>& lines) {
  if (lines.size() <= 5) return fmt::format("{}", fmt::join(lines, ", "));
  return fmt::format("{}, ... ({} lines)", fmt::join(lines.begin(), lines.begin() + 4, ", "), lines.size());
}

void note_lines(RunData& run, const char* file, const LinesRead& r) {
  if (r.torn_last_line) {
    run.notes.push_back(fmt::format("{}: the last line is torn (a write in progress or a killed run); skipped", file));
  }
  if (!r.bad_lines.empty()) {
    run.notes.push_back(fmt::format("{}: {} {} not a JSON record; skipped (line {})", file, r.bad_lines.size(),
                                    r.bad_lines.size() == 1 ? "line is" : "lines are", line_list(r.bad_lines)));
  }
}

// Run directories directly below `dir`, for the "not a run directory" message.
std::vector<std::string> runs_below(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2) &&
        (fs::exists(it->path() / "metrics.jsonl", e2) || fs::exists(it->path() / "events.jsonl", e2))) {
      found.push_back((dir / it->path().filename()).string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

const nlohmann::json* RunData::last_event(const std::string& kind, const std::string& field) const {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (it->value("event", "") == kind && (field.empty() || it->contains(field))) return &*it;
  }
  return nullptr;
}

std::vector<const nlohmann::json*> RunData::events_of(const std::string& kind) const {
  std::vector<const nlohmann::json*> out;
  for (const nlohmann::json& e : events) {
    if (e.value("event", "") == kind) out.push_back(&e);
  }
  return out;
}

bool RunData::finished() const {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    const std::string kind = it->value("event", "");
    if (kind == "finish") return true;
    if (kind == "start") return false;
  }
  return false;
}

Status check_run_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path p(dir);
  if (!fs::exists(p, ec)) return not_found("{}: no such directory", dir);
  if (!fs::is_directory(p, ec)) return invalid_argument("{}: not a directory (kiln report takes run directories)", dir);
  if (fs::exists(p / "metrics.jsonl", ec) || fs::exists(p / "events.jsonl", ec)) return ok_status();
  const std::vector<std::string> below = runs_below(p);
  if (below.empty()) {
    return invalid_argument(
        "{}: not a run directory (no metrics.jsonl or events.jsonl; a run writes them to "
        "{{base_output_directory}}/{{run_name}}/)",
        dir);
  }
  const size_t shown = std::min<size_t>(below.size(), 4);
  return invalid_argument("{}: not a run directory (no metrics.jsonl or events.jsonl); the runs below it: {}{}", dir,
                          fmt::join(below.begin(), below.begin() + shown, " "), below.size() > shown ? " ..." : "");
}

Result<RunData> read_run(const std::string& dir) {
  KILN_RETURN_IF_ERROR(check_run_dir(dir));
  RunData run;
  run.dir = dir;
  fs::path p(dir);
  run.name = p.filename().string();
  if (run.name.empty() || run.name == "." || run.name == "..") {
    std::error_code ec;
    const fs::path abs = fs::weakly_canonical(fs::absolute(p, ec), ec);
    run.name = abs.filename().string().empty() ? dir : abs.filename().string();
  }
  for (const char* field : kMetricFields) run.metrics.column[field];

  KILN_ASSIGN_OR_RETURN(std::optional<std::string> metrics_text, read_file(p / "metrics.jsonl"));
  if (metrics_text) {
    LinesRead lines = for_each_record(*metrics_text, [&](nlohmann::json& j) { return add_metrics_record(run, j); });
    lines.replaced = run.metrics_file.replaced;  // counted by add_metrics_record
    run.metrics_file = lines;
    note_lines(run, "metrics.jsonl", run.metrics_file);
    if (run.metrics_file.replaced > 0) {
      run.notes.push_back(fmt::format(
          "metrics.jsonl: {} records were written again by a later attempt (a restart); the later ones are shown",
          run.metrics_file.replaced));
    }
    if (run.metrics.size() == 0) run.notes.push_back("metrics.jsonl holds no steps yet");
  } else {
    run.notes.push_back("no metrics.jsonl: no steps recorded yet");
  }

  KILN_ASSIGN_OR_RETURN(std::optional<std::string> events_text, read_file(p / "events.jsonl"));
  if (events_text) {
    run.events_file = for_each_record(*events_text, [&](nlohmann::json& j) {
      auto kind = j.find("event");
      if (kind == j.end() || !kind->is_string()) return false;
      run.events.push_back(std::move(j));
      return true;
    });
    note_lines(run, "events.jsonl", run.events_file);
  } else {
    run.notes.push_back(
        "no events.jsonl (a run from before events were recorded, or one that has not started): no compile census, "
        "config, evals, checkpoint events or attribution");
  }
  if (run.events_file.exists && !run.finished()) {
    run.notes.push_back(run.events_of("start").empty()
                            ? "events.jsonl has no start event"
                            : "no finish event after the last start: the run is in progress, or it was stopped");
  }

  KILN_ASSIGN_OR_RETURN(std::optional<std::string> attribution, read_file(p / "profile" / "attribution.txt"));
  run.attribution_text = std::move(attribution);

  std::error_code ec;
  for (fs::directory_iterator it(p / "checkpoints", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (!fs::exists(it->path() / "manifest.json", e2) || name.size() > 18) continue;
    run.checkpoint_steps.push_back(std::stoll(name));
  }
  std::sort(run.checkpoint_steps.begin(), run.checkpoint_steps.end());
  run.has_tensorboard = fs::is_directory(p / "tensorboard", ec);
  return run;
}

bool run_finished(const std::string& dir) {
  Result<std::optional<std::string>> text = read_file(fs::path(dir) / "events.jsonl");
  if (!text.ok() || !text->has_value()) return false;
  RunData run;
  for_each_record(**text, [&](nlohmann::json& j) {
    if (!j.contains("event") || !j["event"].is_string()) return false;
    const std::string kind = j["event"].get<std::string>();
    if (kind == "start" || kind == "finish") run.events.push_back(std::move(j));
    return true;
  });
  return run.finished();
}

}  // namespace kiln::report
