// `kiln report`'s reader of a run directory: metrics.jsonl, events.jsonl and
// profile/attribution.txt cut from one input, read (report::read_run: content problems become
// notes) and rendered into the page (report::render_report), goodput and every table included.
#include "kiln/report/report.h"
#include "kiln/report/run_data.h"
#include "tests/fuzz/fuzz_files.h"

#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string dir = kiln::fuzz::fresh_dir("report_run_dir");
  for (const auto& [name, bytes] : kiln::fuzz::split_files({reinterpret_cast<const char*>(data), size}, "metrics.jsonl")) {
    if (name == "attribution.txt") {
      std::filesystem::create_directories(dir + "/profile");
      kiln::fuzz::write_file(dir + "/profile", name, bytes);
    } else {
      kiln::fuzz::write_file(dir, name, bytes);
    }
  }
  kiln::Result<kiln::report::RunData> run = kiln::report::read_run(dir);
  if (!run.ok()) return 0;
  kiln::report::ReportOptions options;
  (void)kiln::report::render_report({dir}, options);
  return 0;
}
