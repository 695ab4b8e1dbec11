// The page's tables: the numbers a person copies are text here, never only pixels.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/report/report_internal.h"

namespace kiln::report::internal {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double num(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

std::string utc_time(double unix_s, const char* format) {
  if (!std::isfinite(unix_s)) return "—";
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// <th> cells naming the runs, each with its colour.
std::string run_headers(const std::vector<RunView>& runs) {
  std::string out;
  for (const RunView& v : runs) {
    out += fmt::format("<th class=\"run\"><span class=\"swatch\" style=\"background:{}\"></span>{}</th>", v.color,
                       html_escape(v.run->name));
  }
  return out;
}

std::string cell(const std::string& key, const RunView& v, const std::string& text, const std::string& cls = "") {
  return fmt::format("<td data-key=\"{}\" data-run=\"{}\"{}>{}</td>", key, html_escape(v.run->name),
                     cls.empty() ? "" : " class=\"" + cls + "\"", text);
}

std::string missing(const std::string& text) { return "<span class=\"missing\">" + html_escape(text) + "</span>"; }

// "fsdp 2 × expert 2" from a start event's mesh (axes of size 1 left out).
std::string mesh_text(const nlohmann::json& start) {
  auto mesh = start.find("mesh");
  if (mesh == start.end() || !mesh->is_object()) return "";
  const nlohmann::json axes = mesh->value("axes", nlohmann::json::array());
  std::vector<std::string> parts;
  for (const char* kind : {"dcn", "ici"}) {
    const nlohmann::json sizes = mesh->value(kind, nlohmann::json::array());
    if (!axes.is_array() || !sizes.is_array()) continue;
    for (size_t i = 0; i < axes.size() && i < sizes.size(); ++i) {
      if (!sizes[i].is_number() || sizes[i].get<double>() == 1) continue;
      parts.push_back(fmt::format("{}{} {}", kind == std::string("dcn") ? "dcn " : "", json_text(axes[i]),
                                  json_text(sizes[i])));
    }
  }
  return fmt::format("{}", fmt::join(parts, " × "));
}

double first_time(const RunData& run) {
  for (const nlohmann::json& e : run.events) {
    const double t = num(e, "time");
    if (std::isfinite(t)) return t;
  }
  return kNaN;
}

}  // namespace

std::string summary_section(const std::vector<RunView>& runs) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"status", "status"},
      {"steps", "steps recorded"},
      {"final_loss", "final loss"},
      {"final_eval_loss", "final eval loss"},
      {"median_tokens_per_s", "median tokens/s/device"},
      {"median_mfu", "median MFU"},
      {"median_step_time", "median step time"},
      {"time_in_steps", "time in steps"},
      {"wall_time", "wall time (first start → last event)"},
      {"started", "started"},
      {"devices", "devices"},
      {"peak", "MFU against"},
      {"attempts", "starts"},
      {"checkpoints", "checkpoints on disk"},
  };
  // Rows from "started" on describe the set-up: a second table beside the first.
  std::string results, setup, tiles;
  std::map<std::pair<size_t, std::string>, std::string> value_of;  // (run, key) -> the cell's text
  bool in_setup = false;
  for (const auto& [key, label] : rows) {
    in_setup = in_setup || key == "started";
    std::string& body = in_setup ? setup : results;
    body += "<tr><th>" + html_escape(label) + "</th>";
    size_t run_index = 0;
    for (const RunView& v : runs) {
      const RunData& run = *v.run;
      const Metrics& m = run.metrics;
      const nlohmann::json* start = run.last_event("start", key == "peak" ? "peaks" : "mesh");
      if (start == nullptr) start = run.last_event("start", "num_devices");
      std::string text;
      if (key == "status") {
        text = run.finished() ? fmt::format("finished at step {}", json_text(run.last_event("finish")->value("step", nlohmann::json())))
               : m.size() == 0 ? "no steps yet"
               : run.events_file.exists ? "running, or stopped before its finish event"
                                        : "no events.jsonl (status unknown)";
      } else if (key == "steps") {
        text = m.size() == 0 ? missing("none yet")
                             : fmt::format("{} (steps {}–{})", m.size(), m.step.front(), m.step.back());
      } else if (key == "final_loss") {
        text = m.size() == 0 ? missing("no steps yet")
                             : fmt::format("{} <span class=\"muted\">(step {})</span>",
                                           format_number(m.column.at("loss").back(), 4), m.step.back());
      } else if (key == "final_eval_loss") {
        const nlohmann::json* e = run.last_event("eval");
        text = e == nullptr ? missing(run.events_file.exists ? "no eval events (eval_interval=0 or no eval split)"
                                                             : "no events.jsonl")
                            : fmt::format("{} <span class=\"muted\">(step {})</span>",
                                          format_number(num(*e, "eval_loss"), 4), json_text(e->value("step", nlohmann::json())));
      } else if (key == "median_tokens_per_s") {
        const double x = median_after_warmup(run, "tokens_per_s_per_device");
        text = std::isnan(x) ? missing("—") : format_number(x, 1);
      } else if (key == "median_mfu") {
        const double x = median_after_warmup(run, "mfu");
        text = std::isnan(x) ? missing("—") : format_number(100 * x, 2) + "%";
      } else if (key == "median_step_time") {
        const double x = median_after_warmup(run, "step_time_s");
        text = std::isnan(x) ? missing("—") : format_number(x, 3) + " s";
      } else if (key == "time_in_steps") {
        double sum = 0;
        for (double x : m.column.at("step_time_s")) sum += std::isfinite(x) ? x : 0;
        text = m.size() == 0 ? missing("—") : format_duration(sum);
      } else if (key == "wall_time") {
        const double t0 = first_time(run), t1 = run.events.empty() ? kNaN : num(run.events.back(), "time");
        text = std::isfinite(t0) && std::isfinite(t1) ? format_duration(t1 - t0) : missing("no events.jsonl");
      } else if (key == "started") {
        const double t0 = first_time(run);
        text = std::isfinite(t0) ? utc_time(t0, "%Y-%m-%d %H:%M:%S UTC") : missing("—");
      } else if (key == "devices") {
        if (start == nullptr) {
          text = missing("—");
        } else {
          const std::string mesh = mesh_text(*start);
          text = html_escape(json_text(start->value("num_devices", nlohmann::json("?")))) +
                 (mesh.empty() ? "" : " <span class=\"muted\">(" + html_escape(mesh) + ")</span>");
        }
      } else if (key == "peak") {
        const nlohmann::json peaks = start == nullptr ? nlohmann::json() : start->value("peaks", nlohmann::json());
        if (!peaks.is_object()) {
          text = missing("—");
        } else {
          const std::string compute = peaks.value("compute", std::string("f32"));
          const double peak = num(peaks, (compute + "_tflops").c_str());
          text = html_escape(fmt::format("the {} peak, {} TFLOP/s", compute, format_number(peak, 3)));
          if (peaks.contains("source")) text += " <span class=\"muted\">(" + html_escape(json_text(peaks["source"])) + ")</span>";
        }
      } else if (key == "attempts") {
        std::vector<std::string> restored;
        for (const nlohmann::json* e : run.events_of("checkpoint_restore")) restored.push_back(json_text(e->value("step", nlohmann::json())));
        text = !run.events_file.exists ? missing("—")
               : fmt::format("{}{}", run.events_of("start").size(),
                             restored.empty() ? "" : fmt::format(" (restored at step {})", fmt::join(restored, ", ")));
      } else if (key == "checkpoints") {
        const auto& c = run.checkpoint_steps;
        if (c.empty()) {
          text = missing("none");
        } else if (c.size() <= 8) {
          text = fmt::format("{}", fmt::join(c, ", "));
        } else {
          text = fmt::format("{}, … {} <span class=\"muted\">({} in all)</span>", fmt::join(c.begin(), c.begin() + 3, ", "),
                             fmt::join(c.end() - 3, c.end(), ", "), c.size());
        }
      }
      body += cell(key, v, text);
      value_of[{run_index++, key}] = text;
    }
    body += "</tr>";
  }
  // The headline numbers again, large, one strip per run (the table above stays the place to copy from).
  const std::pair<const char*, const char*> kTiles[] = {{"final_loss", "final loss"},
                                                        {"final_eval_loss", "final eval loss"},
                                                        {"median_tokens_per_s", "median tokens/s/device"},
                                                        {"median_mfu", "median MFU"},
                                                        {"steps", "steps"},
                                                        {"wall_time", "wall time"}};
  for (size_t i = 0; i < runs.size(); ++i) {
    tiles += "<div class=\"tiles\">";
    if (runs.size() > 1) {
      tiles += fmt::format("<div class=\"tile-run\"><span class=\"swatch\" style=\"background:{}\"></span>{}</div>",
                           runs[i].color, html_escape(runs[i].run->name));
    }
    for (const auto& [key, label] : kTiles) {
      std::string text = value_of[{i, key}];
      if (text.find("class=\"missing\"") != std::string::npos) text = "<span class=\"missing\">—</span>";
      const size_t muted = text.find(" <span class=\"muted\">");
      if (muted != std::string::npos) text = text.substr(0, muted);
      if (std::string(key) == "steps") text = text.substr(0, text.find(" ("));
      tiles += fmt::format("<div class=\"tile\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>", text, label);
    }
    tiles += "</div>";
  }
  const std::string head = "<thead><tr><th></th>" + run_headers(runs) + "</tr></thead>";
  return "<section id=\"summary-section\"><h2>Summary</h2>" + tiles + "<div class=\"side\"><table id=\"summary\" class=\"grid\">" +
         head + "<tbody>" + results + "</tbody></table><table id=\"summary-setup\" class=\"grid\">" + head + "<tbody>" +
         setup + "</tbody></table></div><p class=\"caption\">Medians leave out the first step of each start (compilation and "
         "warm-up). MFU is model FLOPs per second over the peak named.</p></section>";
}

std::string attribution_section(const std::vector<RunView>& runs) {
  // Rows in the first run's order, then any others.
  std::vector<std::string> names;
  std::map<std::pair<std::string, std::string>, const nlohmann::json*> row_of;  // (run, name) -> row
  std::string captions, fallbacks;
  bool any = false;
  for (const RunView& v : runs) {
    const nlohmann::json* a = v.run->last_event("attribution");
    if (a != nullptr && a->contains("rows") && (*a)["rows"].is_array()) {
      any = true;
      for (const nlohmann::json& r : (*a)["rows"]) {
        if (!r.is_object()) continue;
        const std::string name = r.value("name", "");
        if (name.empty()) continue;
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
        row_of[{v.run->name, name}] = &r;
      }
      captions += fmt::format("<li><span class=\"swatch\" style=\"background:{}\"></span>{}: {} s per step, MFU {}% "
                              "<span class=\"muted\">(measured over the run, written at step {})</span></li>",
                              v.color, html_escape(v.run->name), format_number(num(*a, "step_s"), 4),
                              format_number(100 * num(*a, "mfu"), 2), html_escape(json_text(a->value("step", nlohmann::json()))));
    } else if (v.run->attribution_text) {
      fallbacks += fmt::format("<h3>{}: profile/attribution.txt</h3><pre>{}</pre>", html_escape(v.run->name),
                               html_escape(*v.run->attribution_text));
    } else {
      captions += fmt::format("<li><span class=\"swatch\" style=\"background:{}\"></span>{}: {}</li>", v.color,
                              html_escape(v.run->name),
                              missing("no attribution (it is measured with report=true or profiler=trace, and "
                                      "written at the end of a run)"));
    }
  }
  std::string out = "<section id=\"attribution-section\"><h2>Where the step time went</h2><ul class=\"plain\">" +
                    captions + "</ul>";
  if (any) {
    // Bars: one group per category (the total row is the sum, left out), a bar per run.
    size_t bars = 0;
    for (const std::string& n : names) bars += n == "total" ? 0 : runs.size();
    out += fmt::format("<div class=\"side\"><div class=\"chart-box grow\" style=\"height:{}px\"><canvas "
                       "id=\"chart-attribution\"></canvas></div>",
                       std::clamp<size_t>(60 + bars * 24, 220, 900));
    std::string head = "<tr><th rowspan=\"2\">category</th>", sub = "<tr>";
    for (const RunView& v : runs) {
      head += fmt::format("<th colspan=\"4\" class=\"run\"><span class=\"swatch\" style=\"background:{}\"></span>{}</th>",
                          v.color, html_escape(v.run->name));
      sub += "<th>s/step</th><th>share</th><th>achieved rate</th><th>MFU without</th>";
    }
    std::string body;
    for (const std::string& n : names) {
      body += "<tr" + std::string(n == "total" ? " class=\"total\"" : "") + "><th>" + html_escape(n) + "</th>";
      for (const RunView& v : runs) {
        auto it = row_of.find({v.run->name, n});
        if (it == row_of.end()) {
          body += "<td></td><td></td><td></td><td></td>";
          continue;
        }
        const nlohmann::json& r = *it->second;
        const double without = num(r, "mfu_without");
        body += fmt::format("<td>{}</td><td>{}%</td><td class=\"text\">{}</td><td>{}</td>",
                            format_number(num(r, "seconds"), 4), format_number(num(r, "percent"), 1),
                            html_escape(r.contains("rate") ? json_text(r["rate"]) : ""),
                            std::isnan(without) ? "" : format_number(100 * without, 2) + "%");
      }
      body += "</tr>";
    }
    out += "<table id=\"attribution-table\" class=\"grid\"><thead>" + head + "</tr>" + sub + "</tr></thead><tbody>" +
           body + "</tbody></table></div><p class=\"caption\">MFU without: the MFU the run would reach if this "
           "category took no time.</p>";
  }
  return out + fallbacks + "</section>";
}

std::string census_section(const std::vector<RunView>& runs) {
  std::vector<const nlohmann::json*> compiles;
  bool any = false;
  for (const RunView& v : runs) {
    compiles.push_back(v.run->last_event("compile"));
    any = any || compiles.back() != nullptr;
  }
  std::string out = "<section id=\"census-section\"><h2>Compiled step</h2>";
  if (!any) return out + "<p>" + missing("no compile event in events.jsonl") + "</p></section>";
  // (label, text per run)
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& label, auto&& text_of) {
    std::vector<std::string> texts;
    bool some = false;
    for (const nlohmann::json* c : compiles) {
      const nlohmann::json census = c == nullptr ? nlohmann::json() : c->value("census", nlohmann::json::object());
      std::string t = c == nullptr ? "" : text_of(*c, census);
      some = some || !t.empty();
      texts.push_back(t);
    }
    if (some) rows.emplace_back(label, std::move(texts));
  };
  auto count = [](const char* key) {
    return [key](const nlohmann::json&, const nlohmann::json& census) {
      const double x = num(census, key);
      return std::isnan(x) ? std::string() : fmt::format("{:.0f}", x);
    };
  };
  row("instructions (before → after the passes)", [](const nlohmann::json&, const nlohmann::json& census) {
    const double before = num(census, "instructions_before"), after = num(census, "instructions");
    if (std::isnan(after)) return std::string();
    return std::isnan(before) ? fmt::format("{:.0f}", after) : fmt::format("{:.0f} → {:.0f}", before, after);
  });
  row("fused kernels (unique)", [](const nlohmann::json&, const nlohmann::json& census) {
    const double fused = num(census, "fused_kernels"), unique = num(census, "unique_kernels");
    if (std::isnan(fused)) return std::string();
    return std::isnan(unique) ? fmt::format("{:.0f}", fused) : fmt::format("{:.0f} ({:.0f} unique)", fused, unique);
  });
  row("GEMMs", count("gemms"));
  row("attention kernels", count("attention_kernels"));
  row("grouped-matmul kernels", count("grouped_matmul_kernels"));
  row("library kernel calls", count("library_kernels"));
  row("fallback kernels (reference evaluation)", count("fallback_kernels"));
  std::set<std::string> kinds;
  for (const nlohmann::json* c : compiles) {
    if (c == nullptr) continue;
    const nlohmann::json coll = c->value("census", nlohmann::json::object()).value("collectives", nlohmann::json::object());
    if (coll.is_object()) {
      for (auto it = coll.begin(); it != coll.end(); ++it) kinds.insert(it.key());
    }
  }
  if (kinds.empty()) {
    row("collectives", [](const nlohmann::json&, const nlohmann::json&) { return std::string("none"); });
  }
  for (const std::string& kind : kinds) {
    row("collectives: " + kind, [&kind](const nlohmann::json&, const nlohmann::json& census) {
      const nlohmann::json k = census.value("collectives", nlohmann::json::object()).value(kind, nlohmann::json());
      if (!k.is_object()) return std::string("0");
      return fmt::format("{:.0f} ({} in all)", num(k, "count"), format_bytes(num(k, "bytes")));
    });
  }
  row("collectives overlapped with compute", count("overlapped_collectives"));
  row("planned memory per device", [](const nlohmann::json&, const nlohmann::json& census) {
    const double b = num(census, "memory_per_device_bytes");
    return std::isnan(b) ? std::string() : format_bytes(b);
  });
  row("trace / compile / init", [](const nlohmann::json& c, const nlohmann::json&) {
    return fmt::format("{} / {} / {}", format_duration(num(c, "trace_s")), format_duration(num(c, "compile_s")),
                       format_duration(num(c, "init_s")));
  });
  std::string body;
  for (const auto& [label, texts] : rows) {
    body += "<tr><th>" + html_escape(label) + "</th>";
    for (const std::string& t : texts) body += "<td>" + html_escape(t) + "</td>";
    body += "</tr>";
  }
  return out + "<table id=\"census\" class=\"grid\"><thead><tr><th></th>" + run_headers(runs) + "</tr></thead><tbody>" +
         body + "</tbody></table><p class=\"caption\">The per-device program the trainer compiled (the last compile "
         "event of each run).</p></section>";
}

std::string config_section(const std::vector<RunView>& runs) {
  std::string out = "<section id=\"config-section\"><h2>Config that differs from base.yml</h2>";
  std::map<std::string, std::vector<std::optional<std::string>>> values;
  std::map<std::string, std::string> source;
  bool any = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const nlohmann::json* start = runs[i].run->last_event("start", "config_diff");
    if (start == nullptr) continue;
    const nlohmann::json diff = start->value("config_diff", nlohmann::json::object());
    const nlohmann::json sources = start->value("config_sources", nlohmann::json::object());
    if (!diff.is_object()) continue;
    any = true;
    for (auto it = diff.begin(); it != diff.end(); ++it) {
      auto& v = values[it.key()];
      v.resize(runs.size());
      v[i] = json_text(it.value());
      if (sources.is_object() && sources.contains(it.key())) source[it.key()] = json_text(sources[it.key()]);
    }
  }
  if (!any) return out + "<p>" + missing("no start event with config_diff in events.jsonl") + "</p></section>";
  // Keys whose values differ between the runs first, then what the user set, then the rest.
  auto rank = [&](const std::string& key) {
    const auto& v = values[key];
    bool differs = false;
    for (const auto& x : v) differs = differs || x != v.front();
    const std::string& s = source[key];
    return (differs && runs.size() > 1 ? 0 : 4) + (s == "override" ? 0 : s == "config" ? 1 : s == "model" ? 2 : 3);
  };
  std::vector<std::string> keys;
  for (const auto& [key, v] : values) keys.push_back(key);
  std::stable_sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  std::string body, model_body;
  int differing = 0, from_model = 0;
  for (const std::string& key : keys) {
    auto& v = values[key];
    v.resize(runs.size());
    const bool differs = runs.size() > 1 && rank(key) < 4;
    differing += differs;
    // What the model's file sets (and every run agrees on) folds away: it is the model, not the run.
    const bool folded = !differs && source[key] == "model";
    from_model += folded;
    std::string& rows_html = folded ? model_body : body;
    rows_html += fmt::format("<tr{}><th>{}</th><td class=\"source\">{}</td>", differs ? " class=\"differs\"" : "",
                        html_escape(key), html_escape(source.count(key) ? source[key] : ""));
    for (const auto& x : v) rows_html += "<td class=\"text\">" + (x ? html_escape(*x) : missing("(base)")) + "</td>";
    rows_html += "</tr>";
  }
  std::string caption = fmt::format("{} keys; source: override (key=value), config (CONFIG.yml) or model (the "
                                    "model's file).", keys.size());
  if (runs.size() > 1) caption = fmt::format("{} differ between the runs (highlighted, listed first). ", differing) + caption;
  const std::string head = "<thead><tr><th>key</th><th>source</th>" + run_headers(runs) + "</tr></thead>";
  out += "<table id=\"config\" class=\"grid\">" + head + "<tbody>" + body + "</tbody></table>";
  if (from_model > 0) {
    out += fmt::format("<details><summary>{} more {} set by the model's file</summary><table id=\"config-model\" "
                       "class=\"grid\">{}<tbody>{}</tbody></table></details>",
                       from_model, from_model == 1 ? "key" : "keys", head, model_body);
  }
  return out + "<p class=\"caption\">" + html_escape(caption) + "</p></section>";
}

std::string events_section(const std::vector<RunView>& runs) {
  std::string out = "<section id=\"events-section\"><h2>Data and checkpoint events</h2>";
  struct Row {
    double time;
    size_t run;
    const nlohmann::json* e;
  };
  std::vector<Row> rows;
  std::map<std::string, int64_t> counts;
  double t0 = std::numeric_limits<double>::infinity();
  bool any_file = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    any_file = any_file || runs[i].run->events_file.exists;
    for (const nlohmann::json& e : runs[i].run->events) {
      const std::string kind = e.value("event", "");
      if (kind == "compile" || kind == "attribution" || kind == "goodput") continue;  // their own sections
      ++counts[kind];
      const double t = num(e, "time");
      if (std::isfinite(t)) t0 = std::min(t0, t);
      rows.push_back({t, i, &e});
    }
  }
  if (!any_file) return out + "<p>" + missing("no events.jsonl") + "</p></section>";
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::isfinite(a.time) && std::isfinite(b.time) ? a.time < b.time : false;
  });
  auto n = [&](const char* k) { return counts.count(k) ? counts[k] : 0; };
  out += fmt::format("<p class=\"caption\">{} checkpoint saves, {} restores, {} data stalls, {} evals.</p>",
                     n("checkpoint_save"), n("checkpoint_restore"), n("data_stall"), n("eval"));
  const bool several = runs.size() > 1;
  std::string body;
  for (const Row& r : rows) {
    const nlohmann::json& e = *r.e;
    const std::string kind = e.value("event", "");
    std::string detail;
    if (kind == "start") {
      detail = fmt::format("attempt {}, {} device(s)", json_text(e.value("attempt", nlohmann::json("?"))),
                           json_text(e.value("num_devices", nlohmann::json("?"))));
    } else if (kind == "checkpoint_save") {
      detail = fmt::format("{} (the step was blocked {}{})", json_text(e.value("path", nlohmann::json(""))),
                           format_duration(num(e, "blocked_s")), e.value("background", false) ? ", saved in the background" : "");
    } else if (kind == "checkpoint_restore") {
      detail = json_text(e.value("path", nlohmann::json("")));
    } else if (kind == "data_stall") {
      detail = fmt::format("waited {} for data", format_duration(num(e, "wait_s")));
    } else if (kind == "eval") {
      detail = "eval loss " + format_number(num(e, "eval_loss"), 4);
    } else if (kind == "restart") {
      detail = fmt::format("restarted by kiln supervise (attempt {}) after {}",
                           json_text(e.value("supervisor_attempt", nlohmann::json("?"))),
                           json_text(e.value("previous", nlohmann::json("a failure"))));
    } else if (kind != "finish") {
      nlohmann::json rest = e;
      for (const char* k : {"time", "event", "step"}) rest.erase(k);
      detail = json_text(rest);
    }
    const double dt = r.time - t0;
    body += fmt::format("<tr class=\"ev-{}\">{}<td title=\"{}\">+{}</td><td class=\"text\">{}</td><td>{}</td><td class=\"text\">{}</td></tr>",
                        html_escape(kind),
                        several ? fmt::format("<td class=\"text\"><span class=\"swatch\" style=\"background:{}\"></span>{}</td>",
                                              runs[r.run].color, html_escape(runs[r.run].run->name))
                                : "",
                        utc_time(r.time, "%Y-%m-%d %H:%M:%S UTC"),
                        !std::isfinite(dt) ? "?" : dt < 120 ? fmt::format("{:.1f} s", dt) : format_duration(dt),
                        html_escape(kind), html_escape(json_text(e.value("step", nlohmann::json("")))), html_escape(detail));
  }
  return out + "<div class=\"scroll\"><table id=\"events\" class=\"grid\"><thead><tr>" +
         (several ? "<th>run</th>" : "") + "<th>time</th><th>event</th><th>step</th><th>detail</th></tr></thead><tbody>" +
         body + "</tbody></table></div></section>";
}

}  // namespace kiln::report::internal
