// The pieces report.cc assembles a page from: HTML and number helpers, the table sections
// (report_tables.cc), the JSON blob the charts read (report_data.cc), and the page's own
// style and script (report_assets.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/report/report.h"
#include "kiln/report/run_data.h"

namespace kiln::report::internal {

// A run as the page shows it: its data and its colour (the same in every chart and table).
struct RunView {
  const RunData* run;
  std::string color;  // "#4e79a7"
};

// & < > " ' as entities: for text and attribute values.
std::string html_escape(std::string_view text);
// JSON that is safe inside <script>: '<', '>' and '&' become \u003c, \u003e, \u0026 (they
// only occur inside JSON strings, where those escapes mean the same), and invalid UTF-8 is
// replaced, so no value can close the element or break parsing.
std::string script_json(const nlohmann::json& value);

// Text for people: "8.8090", "1244.9", "20.72%", "26.0 s", "3 h 02 min", "170.1 MiB".
std::string format_number(double v, int decimals);
std::string format_duration(double seconds);
std::string format_bytes(double bytes);
// A JSON value as a table cell's text: strings as they are, numbers as written, others dumped.
std::string json_text(const nlohmann::json& value);

// Median of the finite values of a metric over the steps that are not the first of a start
// (compilation and warm-up land there), or NaN.
double median_after_warmup(const RunData& run, const std::string& field);

// Sections of the page (each a <section> with its heading).
std::string summary_section(const std::vector<RunView>& runs);
std::string attribution_section(const std::vector<RunView>& runs);
std::string census_section(const std::vector<RunView>& runs);
std::string config_section(const std::vector<RunView>& runs);
std::string events_section(const std::vector<RunView>& runs);

// The blob the page's script draws from: per run its steps and series (bucketed to at most
// max_points), evals, expert load and attribution rows.
nlohmann::json page_data(const std::vector<RunView>& runs, const ReportOptions& options);

extern const char* const kReportCss;
extern const char* const kReportJs;

}  // namespace kiln::report::internal
