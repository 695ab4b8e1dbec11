// A run directory's history files as a restart meets them: metrics.jsonl (any bytes: torn
// lines, repeated or unordered steps, non-objects) continued from a step the input picks
// (JsonlWriter::open_continuing, which keeps, drops and rewrites records and appends the
// dropped ones to metrics.jsonl.discarded), then one record appended; events.jsonl the same
// way (RunEvents::open counts earlier attempts, moves a torn tail aside, appends).
#include "kiln/train/observability/metrics.h"
#include "kiln/train/observability/run_events.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln::train;
  const std::string dir = kiln::fuzz::fresh_dir("run_history");
  std::string metrics = (std::string(dir) + "/metrics.jsonl"), events = dir + "/events.jsonl";
  const auto files = kiln::fuzz::split_files({reinterpret_cast<const char*>(data), size}, "metrics.jsonl");
  for (const auto& [name, bytes] : files) kiln::fuzz::write_file(dir, name, bytes);
  // The step the restart resumes at: from the input, so every boundary is reached.
  const int64_t first_step = size == 0 ? 0 : static_cast<int64_t>(data[size - 1] % 40);
  {
    JsonlWriter writer;
    kiln::Result<JsonlWriter::History> h = writer.open_continuing(metrics, 1 + (size % 3), first_step);
    if (h.ok()) {
      StepRecord r;
      r.step = first_step;
      r.loss = 1.0;
      (void)writer.write(r);
      (void)writer.flush();
    }
  }
  {
    RunEvents ev;
    kiln::Result<int64_t> attempts = ev.open(events);
    if (attempts.ok()) (void)ev.write("start", first_step, {{"attempt", *attempts + 1}});
  }
  return 0;
}
