// kiln report: a run's page (report.html), once or kept live while the run trains.
//   kiln report RUN_DIR                      RUN_DIR/report.html
//   kiln report RUN_A RUN_B -o cmp.html      several runs overlaid on one page (-o required)
//   kiln report RUN_DIR --follow [--interval S]
//       re-renders whenever metrics.jsonl or events.jsonl change; the page reloads itself
//       every S seconds (meta refresh); stops when every run's last start has its finish
//       event, or on Ctrl-C / SIGTERM, and then writes the page once more without the reload.
// A missing directory or one that is not a run: one line `kiln: error: ...`, exit 2.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "command.h"
#include "kiln/report/report.h"
#include "kiln/report/run_data.h"

namespace kiln::app {

namespace {

struct Options {
  std::vector<std::string> run_dirs;
  std::string output, chartjs;
  bool follow = false;
  double interval = 2.0;
};

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// What the follow loop compares to see that a run wrote something.
std::vector<std::pair<int64_t, int64_t>> stamps(const std::vector<std::string>& dirs) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const std::string& dir : dirs) {
    for (const char* file : {"metrics.jsonl", "events.jsonl"}) {
      struct stat st {};
      const std::string path = (std::filesystem::path(dir) / file).string();
      if (::stat(path.c_str(), &st) != 0) {
        out.emplace_back(-1, -1);
      } else {
        out.emplace_back(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, st.st_size);
      }
    }
  }
  return out;
}

bool all_finished(const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    if (!report::run_finished(dir)) return false;
  }
  return true;
}

std::string file_url(const std::string& path) {
  std::error_code ec;
  return "file://" + std::filesystem::absolute(path, ec).lexically_normal().string();
}

int run_report(const Options& o) {
  for (const std::string& dir : o.run_dirs) {
    if (Status s = report::check_run_dir(dir); !s.ok()) return report_error(s);
  }
  if (o.run_dirs.size() > 1 && o.output.empty()) {
    return report_error(invalid_argument(
        "{} run directories: name the page they share with -o OUT.html (each run's own report.html is "
        "RUN_DIR/report.html, from kiln report RUN_DIR)",
        o.run_dirs.size()));
  }
  if (o.follow && !(o.interval > 0 && std::isfinite(o.interval))) {
    return report_error(invalid_argument("--interval {}: give a positive number of seconds", o.interval));
  }
  const std::string out =
      o.output.empty() ? (std::filesystem::path(o.run_dirs[0]) / "report.html").string() : o.output;
  report::ReportOptions options;
  options.chartjs_path = o.chartjs;
  if (!std::filesystem::exists(report::chartjs_path(options))) {
    std::fprintf(stderr,
                 "kiln: note: Chart.js not found at %s: the page will have its tables but no charts (install "
                 "Debian's libjs-chart.js, or set KILN_CHARTJS)\n",
                 report::chartjs_path(options).c_str());
  }

  if (!o.follow) {
    if (Status s = report::write_report_to(o.run_dirs, out, options); !s.ok()) return report_error(s);
    fmt::print("wrote {}  ({})\n", out, file_url(out));
    return kExitOk;
  }

  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  report::ReportOptions live = options;
  live.refresh_seconds = std::max(1.0, o.interval);
  std::vector<std::pair<int64_t, int64_t>> last;
  bool first = true;
  std::string why;
  while (true) {
    if (all_finished(o.run_dirs)) {
      why = o.run_dirs.size() == 1 ? "the run wrote its finish event" : "every run wrote its finish event";
      break;
    }
    if (g_stop_signal != 0) break;
    const auto now = stamps(o.run_dirs);
    double pause = o.interval;
    if (now != last) {
      last = now;
      const auto t0 = std::chrono::steady_clock::now();
      if (Status s = report::write_report_to(o.run_dirs, out, live); !s.ok()) return report_error(s);
      // A long run takes a while to render (about 2 s for 100 000 steps): spend at most a fifth
      // of the time rendering, leaving the cores to the training.
      pause = std::max(pause, 4 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (first) {
        fmt::print("following: {}  ({}); the page reloads every {:g} s; Ctrl-C stops\n", out, file_url(out),
                   live.refresh_seconds);
        first = false;
      } else {
        fmt::print("updated {}\n", out);
      }
      std::fflush(stdout);
    }
    // Sleep in short slices so a signal or a finish is seen at once.
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(pause);
    while (g_stop_signal == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (g_stop_signal != 0) why = g_stop_signal == SIGINT ? "interrupted (Ctrl-C)" : "stopped by SIGTERM";
  // The last page does not reload: nothing will update it any more.
  if (Status s = report::write_report_to(o.run_dirs, out, options); !s.ok()) return report_error(s);
  fmt::print("stopped following: {}; wrote the final page {}\n", why, out);
  return kExitOk;
}

}  // namespace

std::function<int()> add_report_command(CLI::App& cmd) {
  auto opts = std::make_shared<Options>();
  cmd.add_option("run_dirs", opts->run_dirs, "Run directories ({base_output_directory}/{run_name}/)")
      ->required()
      ->type_name("RUN_DIR...");
  cmd.add_option("-o,--output", opts->output,
                 "Where to write the page (default RUN_DIR/report.html; required with several runs)")
      ->type_name("OUT.html");
  CLI::Option* follow = cmd.add_flag(
      "--follow", opts->follow,
      "Keep the page live: re-render when metrics.jsonl or events.jsonl change, until the run finishes or Ctrl-C");
  cmd.add_option("--interval", opts->interval, "Seconds between checks in --follow mode, and the page's reload period")
      ->type_name("S")
      ->needs(follow);
  cmd.add_option("--chartjs", opts->chartjs,
                 "Chart.js's chart.min.js to inline (default $KILN_CHARTJS, else "
                 "/usr/share/javascript/chart.js/chart.min.js from Debian's libjs-chart.js)")
      ->type_name("PATH");
  return [opts] { return run_report(*opts); };
}

}  // namespace kiln::app
