#include "kiln/report/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "kiln/report/goodput.h"
#include "kiln/report/report_internal.h"
#include "kiln/report/run_data.h"

namespace kiln::report {

namespace fs = std::filesystem;
using internal::html_escape;
using internal::RunView;

namespace {

// Tableau 10: distinct, colour-blind-friendly, readable on white.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

// Chart.js as a script element's text: nothing in it may end the element early.
std::optional<std::string> read_chartjs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  if (text.empty()) return std::nullopt;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"</script", "<\\/script"},
                                 std::pair<std::string, std::string>{"</SCRIPT", "<\\/SCRIPT"},
                                 std::pair<std::string, std::string>{"<!--", "<\\!--"}}) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  return text;
}

// Directory names, made unique: equal names get their parent's name in front, then a number.
void name_runs(std::vector<RunData>& runs) {
  std::map<std::string, int> seen;
  for (const RunData& r : runs) ++seen[r.name];
  for (RunData& r : runs) {
    if (seen[r.name] < 2) continue;
    std::error_code ec;
    const fs::path abs = fs::weakly_canonical(fs::absolute(r.dir, ec), ec);
    const std::string parent = abs.parent_path().filename().string();
    if (!parent.empty()) r.name = parent + "/" + r.name;
  }
  std::map<std::string, int> count;
  for (RunData& r : runs) {
    if (++count[r.name] > 1) r.name += fmt::format(" ({})", count[r.name]);
  }
}

std::string chart_card(const char* id, const char* title, const char* hint) {
  return fmt::format("<div class=\"card\"><h3>{}</h3><p class=\"hint\">{}</p><div class=\"chart-box\"><canvas id=\"{}\" "
                     "class=\"chartjs\"></canvas></div></div>",
                     title, hint, id);
}

std::string charts_section(bool have_chartjs, const std::string& chartjs) {
  std::string out = "<section id=\"charts-section\"><h2>Training curves</h2>";
  if (!have_chartjs) {
    out += fmt::format(
        "<p id=\"no-chartjs\" class=\"missing\">Charts need Chart.js, which was not found at {} when this page was "
        "rendered: install Debian's <code>libjs-chart.js</code> (apt-get install libjs-chart.js) or point "
        "<code>KILN_CHARTJS</code> at chart.min.js, then render again (kiln report RUN_DIR). The tables below are "
        "complete.</p>",
        html_escape(chartjs));
  }
  out += "<div class=\"charts\">";
  out += chart_card("chart-loss", "Loss", "Training loss per step; eval loss as diamonds (dashed).");
  out += chart_card("chart-lr", "Learning rate", "The schedule's value used by each step.");
  out += chart_card("chart-norms", "Gradient and parameter norms",
                    "Global gradient norm after clipping, before clipping (dashed); parameter norm (dotted, right axis).");
  out += chart_card("chart-step-time", "Step time",
                    "Wall time per step; waiting for data (dashed) and exposed collective waits (dotted).");
  out += chart_card("chart-tokens", "Throughput", "Tokens per second per device.");
  out += chart_card("chart-mfu", "Model FLOPs utilization", "Model FLOPs per second over the peak (see Summary).");
  return out + "</div></section>";
}

std::string expert_load_section(const std::vector<RunView>& runs) {
  std::string out = "<section id=\"expert-load-section\"><h2>Expert load</h2>";
  bool any = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = *runs[i].run;
    const std::string name = html_escape(run.name);
    const std::string swatch = fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>", runs[i].color);
    if (run.expert_load.step.empty()) {
      out += fmt::format("<p>{}{}: <span class=\"missing\">no expert_load records yet (written every log_period "
                         "steps for a mixture-of-experts model)</span></p>",
                         swatch, name);
      continue;
    }
    any = true;
    out += fmt::format(
        "<div class=\"heat\"><div class=\"card\"><h3>{0}{1}: imbalance (max / mean per expert)</h3><canvas "
        "id=\"heatmap-imbalance-{2}\"></canvas><div class=\"readout\"></div></div><div class=\"card\"><h3>{0}{1}: "
        "dropped (token, expert) pairs</h3><canvas id=\"heatmap-dropped-{2}\"></canvas><div "
        "class=\"readout\"></div></div></div>",
        swatch, name, i);
  }
  if (any) {
    out += "<p class=\"caption\">Per MoE layer and logged step: the most (token, expert) pairs any expert received "
           "over the mean per expert, and the pairs dropped by the capacity (capacity_factor).</p>";
  }
  return out + "</section>";
}

// dataset_type=hf: the tokens each source gave, as of each run's last record.
std::string data_section(const std::vector<RunView>& runs) {
  std::string rows;
  for (const RunView& v : runs) {
    const RunData& run = *v.run;
    int64_t total = 0;
    for (const auto& [name, count] : run.data_tokens) total += count;
    for (const auto& [name, count] : run.data_tokens) {
      rows += fmt::format("<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}"
                          "</td><td>{:.2f}%</td></tr>",
                          v.color, html_escape(run.name), html_escape(name), count,
                          total > 0 ? 100.0 * static_cast<double>(count) / static_cast<double>(total) : 0.0);
    }
  }
  if (rows.empty()) return "";
  return "<section id=\"data-section\"><h2>Data sources</h2><table><thead><tr><th>run</th><th>source</th><th>tokens "
         "trained on</th><th>share</th></tr></thead><tbody>" +
         rows +
         "</tbody></table><p class=\"caption\">dataset_type=hf: tokens (padding excluded) each source of the stream "
         "gave up to the run's last logged step; a mixture's weights are data_mixture in the config.</p></section>";
}

// Goodput per attempt and over the run (goodput.h), from the goodput events.
std::string goodput_section(const std::vector<RunView>& runs) {
  std::string rows;
  auto row = [&](const RunView& v, const std::string& attempt, const AttemptGoodput* a, double wall, double goodput,
                 double redone) {
    auto s = [](double x) { return fmt::format("{:.2f}", x); };
    rows += fmt::format(
        "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td><td><b>{:.1f}%</b></td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        v.color, html_escape(v.run->name), html_escape(attempt), 100.0 * goodput, s(wall),
        a ? s(a->startup_s) : "", a ? s(a->productive_s) : "", a ? s(a->data_wait_s) : "", a ? s(a->checkpoint_s) : "",
        a ? s(a->eval_s) : "", a ? s(a->other_s) : "", s(redone));
  };
  for (const RunView& v : runs) {
    const RunGoodput run = run_goodput(v.run->events);
    for (const AttemptGoodput& a : run.attempts) {
      row(v, fmt::format("{}{}", a.attempt, a.ended ? "" : " (killed: to its last checkpoint)"), &a, a.wall_s,
          a.goodput(), a.redone_s);
    }
    if (run.attempts.size() + static_cast<size_t>(run.attempts_without_snapshot) > 1) {
      row(v, fmt::format("the run ({} attempts{})", run.attempts.size() + run.attempts_without_snapshot,
                         run.attempts_without_snapshot > 0
                             ? fmt::format(", {} without a snapshot", run.attempts_without_snapshot)
                             : std::string()),
          nullptr, run.wall_s, run.goodput(), run.redone_s);
    }
  }
  if (rows.empty()) return "";
  return "<section id=\"goodput-section\"><h2>Goodput</h2><table><thead><tr><th>run</th><th>attempt</th>"
         "<th>goodput</th><th>wall s</th><th>startup s</th><th>productive s</th><th>data wait s</th>"
         "<th>checkpoint s</th><th>eval s</th><th>other s</th><th>re-done s</th></tr></thead><tbody>" +
         rows +
         "</tbody></table><p class=\"caption\">Goodput: the share of wall time spent in productive steps (each "
         "step's time less its data wait and checkpoint or eval stalls). Startup is tracing, compiling and "
         "initialising or restoring the state. Re-done: steps an earlier attempt ran past its last checkpoint, "
         "run again after a restart; the run's goodput subtracts them. Time between attempts is not counted.</p>"
         "</section>";
}

std::string notes_section(const std::vector<RunView>& runs) {
  std::string items;
  for (const RunView& v : runs) {
    for (const std::string& note : v.run->notes) {
      items += fmt::format("<li><b>{}</b>: {}</li>", html_escape(v.run->name), html_escape(note));
    }
  }
  if (items.empty()) return "";
  return "<section id=\"notes\"><h2>Notes</h2><ul>" + items + "</ul></section>";
}

std::string files_footer(const std::vector<RunView>& runs) {
  std::string items;
  for (const RunView& v : runs) {
    const RunData& r = *v.run;
    std::vector<std::string> parts;
    if (r.metrics_file.exists) parts.push_back(fmt::format("metrics.jsonl ({} steps)", r.metrics.size()));
    if (r.events_file.exists) parts.push_back(fmt::format("events.jsonl ({} events)", r.events.size()));
    if (r.attribution_text) parts.push_back("profile/attribution.txt");
    if (!r.checkpoint_steps.empty()) parts.push_back(fmt::format("checkpoints/ ({})", r.checkpoint_steps.size()));
    if (r.has_tensorboard) {
      parts.push_back(fmt::format("tensorboard/ (<code>tensorboard --logdir {}</code>)",
                                  html_escape((fs::path(r.dir) / "tensorboard").string())));
    }
    std::string joined;
    for (const std::string& p : parts) joined += (joined.empty() ? "" : ", ") + (p.find("<code>") != std::string::npos ? p : html_escape(p));
    items += fmt::format("<li><span class=\"swatch\" style=\"background:{}\"></span><code>{}</code>: {}</li>", v.color,
                         html_escape(r.dir), joined);
  }
  return "<section><footer><h2>Files</h2><ul class=\"plain\">" + items + "</ul></footer></section>";
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

std::string chartjs_path(const ReportOptions& options) {
  if (!options.chartjs_path.empty()) return options.chartjs_path;
  const char* env = std::getenv("KILN_CHARTJS");
  return env != nullptr && *env != '\0' ? env : kDefaultChartJsPath;
}

Result<std::string> render_report(const std::vector<std::string>& run_dirs, const ReportOptions& options) {
  if (run_dirs.empty()) return invalid_argument("no run directory to report on");
  std::vector<RunData> data;
  for (const std::string& dir : run_dirs) {
    KILN_ASSIGN_OR_RETURN(RunData run, read_run(dir));
    data.push_back(std::move(run));
  }
  name_runs(data);
  const int64_t max_points = std::max<int64_t>(options.max_points, 2);
  for (RunData& run : data) {
    const int64_t n = static_cast<int64_t>(run.metrics.size());
    if (n > max_points) {
      const int64_t bucket = (n + max_points - 1) / max_points;
      run.notes.push_back(fmt::format("{} steps: the curves show {} points, each the mean of {} consecutive steps "
                                      "(the tables use every step)",
                                      n, (n + bucket - 1) / bucket, bucket));
    }
  }
  std::vector<RunView> runs;
  for (size_t i = 0; i < data.size(); ++i) runs.push_back({&data[i], kPalette[i % std::size(kPalette)]});

  const std::string chartjs_file = chartjs_path(options);
  const std::optional<std::string> chartjs = read_chartjs(chartjs_file);
  const bool live = options.refresh_seconds > 0;
  const int refresh = live ? std::max(1, static_cast<int>(std::lround(options.refresh_seconds))) : 0;

  std::string names;
  for (const RunView& v : runs) names += (names.empty() ? "" : " vs ") + v.run->name;

  std::string page;
  page.reserve(chartjs ? chartjs->size() + 200000 : 200000);
  page += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  if (live) page += fmt::format("<meta http-equiv=\"refresh\" content=\"{}\">", refresh);
  page += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>Kiln report: " +
          html_escape(names) + "</title><style>" + internal::kReportCss + "</style></head>\n<body>";
  page += "<header><div class=\"bar\"><h1>Kiln <span>run report</span></h1><nav><a href=\"#summary-section\">summary</a>"
          "<a href=\"#charts-section\">curves</a><a href=\"#expert-load-section\">expert load</a><a "
          "href=\"#attribution-section\">step time</a><a href=\"#census-section\">compiled step</a><a "
          "href=\"#config-section\">config</a><a href=\"#events-section\">events</a></nav></div>";
  page += "<p class=\"sub\">" + html_escape(names) + " · rendered " + now_utc();
  if (live) {
    page += fmt::format(" <span class=\"live\" id=\"live\">live: reloads every {} s while kiln report --follow runs</span>",
                        refresh);
  }
  page += "</p></header>\n<main>";
  page += notes_section(runs);
  page += internal::summary_section(runs);
  page += charts_section(chartjs.has_value(), chartjs_file);
  page += expert_load_section(runs);
  page += data_section(runs);
  page += goodput_section(runs);
  page += internal::attribution_section(runs);
  page += "<div class=\"pair\">" + internal::census_section(runs) + internal::config_section(runs) + "</div>";
  page += internal::events_section(runs);
  page += files_footer(runs);
  page += "</main>\n";
  page += "<script type=\"application/json\" id=\"kiln-data\">" + internal::script_json(internal::page_data(runs, options)) +
          "</script>\n";
  if (chartjs) page += "<script>" + *chartjs + "</script>\n";
  page += "<script>" + std::string(internal::kReportJs) + "</script>\n</body></html>\n";
  return page;
}

Status write_file_atomically(const std::string& path, std::string_view contents) {
  static std::atomic<int64_t> counter{0};
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path() && !fs::is_directory(target.parent_path(), ec)) {
    return not_found("{}: no such directory", target.parent_path().string());
  }
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, getpid(), counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot write {}: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error("cannot write {}: {}", tmp, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot write {}: {}", tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot replace {}: {}", path, std::strerror(err));
  }
  return ok_status();
}

Status write_report_to(const std::vector<std::string>& run_dirs, const std::string& out_path,
                       const ReportOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::string page, render_report(run_dirs, options));
  return write_file_atomically(out_path, page);
}

Status write_report(const std::string& run_dir, const ReportOptions& options) {
  return write_report_to({run_dir}, (fs::path(run_dir) / "report.html").string(), options);
}

}  // namespace kiln::report
