// report.html: one self-contained page per run (or one page overlaying several runs) that a
// person would rather look at than metrics.jsonl. It works offline and makes no network
// request: Chart.js (Debian's libjs-chart.js) is read from disk at render time and inlined;
// the runs' data travels as one JSON blob in a <script type="application/json"> element;
// everything a person copies (final loss, eval loss, medians, steps, times) is text in the
// tables, which render even without Chart.js. docs/report.md describes the page.
//
// The trainer calls write_report(run_dir) at each checkpoint and at the end of a run;
// `kiln report` (apps/cmd_report.cc) calls write_report_to, once or in follow mode.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::report {

inline constexpr const char* kDefaultChartJsPath = "/usr/share/javascript/chart.js/chart.min.js";

struct ReportOptions {
  // Chart.js's minified UMD build. "" = $KILN_CHARTJS if set, else kDefaultChartJsPath. When
  // the file is missing the page still has every table and says the charts need libjs-chart.js.
  std::string chartjs_path;
  // > 0: a live page (kiln report --follow) that reloads itself every this many seconds
  // (<meta http-equiv="refresh">, which Chromium honours for file:// pages).
  double refresh_seconds = 0;
  // Longer runs are shown as this many points per curve, each the mean of a bucket of
  // consecutive steps (the tables use every step).
  int64_t max_points = 5000;
};

// The Chart.js file the options name (the rule above).
std::string chartjs_path(const ReportOptions& options);

// The page for one or more run directories (several overlay on the same charts, one legend
// entry per run, named by its directory). Errors: NotFound for a missing directory,
// InvalidArgument for one that is not a run (neither metrics.jsonl nor events.jsonl). A run
// with no steps yet, torn or corrupt lines, missing events: the page says what is missing.
Result<std::string> render_report(const std::vector<std::string>& run_dirs, const ReportOptions& options = {});

// Renders `run_dirs` and writes the page to `out_path` atomically (a temporary file in the
// same directory, then a rename): a reader sees the old page or the new one, never half.
Status write_report_to(const std::vector<std::string>& run_dirs, const std::string& out_path,
                       const ReportOptions& options = {});

// RUN_DIR/report.html for one run (write_report_to).
Status write_report(const std::string& run_dir, const ReportOptions& options = {});

// `contents` to `path` through PATH.tmp.<pid> + fsync + rename.
Status write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace kiln::report
