#include "kiln/report/goodput.h"

#include <fmt/format.h>

namespace kiln::report {

namespace {

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

RunGoodput run_goodput(const std::vector<nlohmann::json>& events) {
  RunGoodput run;
  int64_t attempt = 0;
  const nlohmann::json* last = nullptr;  // the current attempt's last snapshot
  auto close = [&] {
    if (attempt == 0) return;
    if (last == nullptr) {
      ++run.attempts_without_snapshot;
      return;
    }
    AttemptGoodput a;
    a.attempt = attempt;
    a.ended = last->value("final", false);
    a.wall_s = num(*last, "wall_s");
    a.startup_s = num(*last, "startup_s");
    a.productive_s = num(*last, "productive_s");
    a.data_wait_s = num(*last, "data_wait_s");
    a.checkpoint_s = num(*last, "checkpoint_s");
    a.eval_s = num(*last, "eval_s");
    a.other_s = num(*last, "other_s");
    a.redone_s = num(*last, "redone_s");
    run.wall_s += a.wall_s;
    run.productive_s += a.productive_s;
    run.redone_s += a.redone_s;
    run.attempts.push_back(a);
  };
  for (const nlohmann::json& e : events) {
    const std::string kind = e.value("event", "");
    if (kind == "start") {
      close();
      ++attempt;
      last = nullptr;
    } else if (kind == "goodput") {
      last = &e;
    }
  }
  close();
  return run;
}

std::string goodput_line(const AttemptGoodput& a, const RunGoodput& run) {
  std::string line = fmt::format(
      "goodput: {:.1f}% of this attempt's {:.2f} s in productive steps (startup {:.2f} s, data waits {:.2f} s, "
      "checkpoints {:.2f} s, eval {:.2f} s, other {:.2f} s)",
      100.0 * a.goodput(), a.wall_s, a.startup_s, a.data_wait_s, a.checkpoint_s, a.eval_s, a.other_s);
  const size_t attempts = run.attempts.size() + static_cast<size_t>(run.attempts_without_snapshot);
  if (attempts > 1) {
    line += fmt::format("; the run: {:.1f}% of {:.2f} s over {} attempts ({:.2f} s of steps re-done after restarts)",
                        100.0 * run.goodput(), run.wall_s, attempts, run.redone_s);
  }
  return line;
}

}  // namespace kiln::report
