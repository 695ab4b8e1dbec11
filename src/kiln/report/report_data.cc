// The page's helpers for text and the JSON blob its charts draw from.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "kiln/report/report_internal.h"

namespace kiln::report::internal {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Six significant digits keep the blob compact (a curve needs no more); NaN dumps as null.
double round6(double v) {
  if (!std::isfinite(v)) return kNaN;
  return std::strtod(fmt::format("{:.6g}", v).c_str(), nullptr);
}

double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  int64_t n = 0;
  for (size_t i = begin; i < end; ++i) {
    if (std::isfinite(v[i])) {
      sum += v[i];
      ++n;
    }
  }
  return n == 0 ? kNaN : sum / static_cast<double>(n);
}

// Steps where a start event began an attempt (the first step each attempt runs).
std::set<int64_t> start_steps(const RunData& run) {
  std::set<int64_t> steps;
  for (const nlohmann::json* e : run.events_of("start")) {
    if (e->contains("step") && (*e)["step"].is_number()) steps.insert((*e)["step"].get<int64_t>());
  }
  return steps;
}

nlohmann::json series_json(const RunData& run, size_t bucket) {
  const Metrics& m = run.metrics;
  nlohmann::json x = nlohmann::json::array();
  for (size_t b = 0; b < m.size(); b += bucket) x.push_back(m.step[std::min(b + bucket, m.size()) - 1]);
  nlohmann::json s = nlohmann::json::object();
  for (const char* field : kMetricFields) {
    auto present = m.present.find(field);
    if (present == m.present.end() || !present->second) continue;
    const std::vector<double>& v = m.column.at(field);
    nlohmann::json values = nlohmann::json::array();
    for (size_t b = 0; b < m.size(); b += bucket) {
      values.push_back(round6(bucket == 1 ? v[b] : mean_of(v, b, std::min(b + bucket, m.size()))));
    }
    s[field] = std::move(values);
  }
  return {{"x", std::move(x)}, {"s", std::move(s)}};
}

// The heat maps draw one column per logged step; past kMaxColumns, a column is the most
// loaded (max, dropped) and the mean (mean) of a bucket of logged steps.
constexpr size_t kMaxColumns = 600;

nlohmann::json expert_load_json(const ExpertLoad& e) {
  if (e.step.empty()) return nullptr;
  size_t layers = 0;
  for (const auto& row : e.layers) layers = std::max(layers, row.size());
  const size_t bucket = (e.step.size() + kMaxColumns - 1) / kMaxColumns;
  nlohmann::json x = nlohmann::json::array(), mx = nlohmann::json::array(), mean = nlohmann::json::array(),
                 dropped = nlohmann::json::array();
  for (size_t b = 0; b < e.step.size(); b += bucket) {
    const size_t end = std::min(b + bucket, e.step.size());
    x.push_back(e.step[end - 1]);
    nlohmann::json cmax = nlohmann::json::array(), cmean = nlohmann::json::array(), cdrop = nlohmann::json::array();
    for (size_t l = 0; l < layers; ++l) {
      double hi = kNaN, sum = 0, drop = kNaN;
      int64_t n = 0;
      for (size_t i = b; i < end; ++i) {
        if (l >= e.layers[i].size()) continue;
        const auto& v = e.layers[i][l];
        if (std::isfinite(v[0])) hi = std::isnan(hi) ? v[0] : std::max(hi, v[0]);
        if (std::isfinite(v[1])) sum += v[1], ++n;
        if (std::isfinite(v[2])) drop = std::isnan(drop) ? v[2] : std::max(drop, v[2]);
      }
      cmax.push_back(round6(hi));
      cmean.push_back(round6(n == 0 ? kNaN : sum / static_cast<double>(n)));
      cdrop.push_back(round6(drop));
    }
    mx.push_back(std::move(cmax));
    mean.push_back(std::move(cmean));
    dropped.push_back(std::move(cdrop));
  }
  return {{"x", std::move(x)},        {"layers", layers},          {"max", std::move(mx)},
          {"mean", std::move(mean)},  {"dropped", std::move(dropped)}, {"bucket", bucket}};
}

nlohmann::json attribution_json(const RunData& run) {
  const nlohmann::json* a = run.last_event("attribution");
  if (a == nullptr || !a->contains("rows") || !(*a)["rows"].is_array()) return nullptr;
  nlohmann::json rows = nlohmann::json::array();
  for (const nlohmann::json& r : (*a)["rows"]) {
    if (!r.is_object()) continue;
    const std::string name = r.value("name", "");
    if (name.empty() || name == "total") continue;
    rows.push_back({{"name", name},
                    {"seconds", r.contains("seconds") && r["seconds"].is_number() ? round6(r["seconds"].get<double>()) : kNaN},
                    {"percent", r.contains("percent") && r["percent"].is_number() ? round6(r["percent"].get<double>()) : kNaN},
                    {"rate", r.contains("rate") ? json_text(r["rate"]) : ""}});
  }
  return {{"rows", std::move(rows)}};
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string script_json(const nlohmann::json& value) {
  const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_number(double v, int decimals) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf");
  return fmt::format("{:.{}f}", v, decimals);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "—";
  if (s == 0) return "0 s";
  if (s < 0.001) return fmt::format("{:.2f} ms", s * 1000);
  if (s < 1) return fmt::format("{:.0f} ms", s * 1000);
  if (s < 120) return fmt::format("{:.1f} s", s);
  const int64_t total = std::llround(s);
  const int64_t h = total / 3600, m = total % 3600 / 60, sec = total % 60;
  if (h == 0) return fmt::format("{} min {:02} s", m, sec);
  if (h < 48) return fmt::format("{} h {:02} min", h, m);
  return fmt::format("{} d {:02} h", h / 24, h % 24);
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) return "—";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string json_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double median_after_warmup(const RunData& run, const std::string& field) {
  const Metrics& m = run.metrics;
  auto column = m.column.find(field);
  if (column == m.column.end()) return kNaN;
  std::set<int64_t> warmup = start_steps(run);
  if (!m.step.empty()) warmup.insert(m.step.front());
  std::vector<double> v, all;
  for (size_t i = 0; i < m.size(); ++i) {
    const double x = column->second[i];
    if (!std::isfinite(x)) continue;
    all.push_back(x);
    if (!warmup.count(m.step[i])) v.push_back(x);
  }
  if (v.empty()) v = all;  // a run of one step per attempt: the warm-up steps are all there is
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + mid) + upper) / 2;
}

nlohmann::json page_data(const std::vector<RunView>& runs, const ReportOptions& options) {
  nlohmann::json out = nlohmann::json::array();
  for (const RunView& view : runs) {
    const RunData& run = *view.run;
    const int64_t max_points = std::max<int64_t>(options.max_points, 2);
    const size_t bucket = std::max<size_t>(1, (run.metrics.size() + max_points - 1) / max_points);
    nlohmann::json r = series_json(run, bucket);
    r["name"] = run.name;
    r["color"] = view.color;
    r["bucket"] = bucket;
    nlohmann::json ex = nlohmann::json::array(), ey = nlohmann::json::array();
    for (const nlohmann::json* e : run.events_of("eval")) {
      if (!e->contains("step") || !(*e)["step"].is_number()) continue;
      ex.push_back((*e)["step"]);
      ey.push_back(e->contains("eval_loss") && (*e)["eval_loss"].is_number() ? round6((*e)["eval_loss"].get<double>())
                                                                              : kNaN);
    }
    r["eval"] = {{"x", std::move(ex)}, {"y", std::move(ey)}};
    r["el"] = expert_load_json(run.expert_load);
    r["attr"] = attribution_json(run);
    out.push_back(std::move(r));
  }
  return {{"runs", std::move(out)}, {"live", options.refresh_seconds > 0}};
}

}  // namespace kiln::report::internal
