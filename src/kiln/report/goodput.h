// Goodput: the fraction of a run's wall time spent in productive training steps.
//
// Each attempt (one `kiln train` process) accounts for its own wall time, from the start of
// the trainer's set-up to its last event, in classes:
//   startup     config to first step: tracing, compiling, initialising or restoring the state
//   productive  the steps' own time (each step's time less its data wait and the checkpoint
//               or eval stall that landed in it)
//   data_wait   steps waiting for their batch
//   checkpoint  the trainer blocked saving (a background save counts only where it blocks)
//   eval        evaluation passes
//   other       the rest (logging, reports, the stop)
// and writes them as a `goodput` event at every checkpoint and when it ends (finish or
// preempted). An attempt killed outright keeps its last snapshot; the steps it ran past its
// last checkpoint are re-done by the next attempt, which finds their records (metrics.jsonl
// .discarded) and reports their time as `redone_s`: productive work lost to the failure.
//
// Over the whole run: goodput = (Σ productive − Σ redone) / Σ wall, over every attempt's
// last snapshot. Time between attempts (a scheduler's restart delay) is not in any attempt
// and not counted; time after a killed attempt's last snapshot is counted only as the
// re-done steps.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::report {

struct AttemptGoodput {
  int64_t attempt = 0;  // 1, 2, ... (the start events' order)
  bool ended = false;   // its last snapshot is a finish or preempted one (not cut by a kill)
  double wall_s = 0, startup_s = 0, productive_s = 0, data_wait_s = 0, checkpoint_s = 0, eval_s = 0, other_s = 0;
  double redone_s = 0;  // earlier attempts' steps this attempt ran again
  double goodput() const { return wall_s > 0 ? productive_s / wall_s : 0.0; }
};

struct RunGoodput {
  std::vector<AttemptGoodput> attempts;  // those with a snapshot
  int64_t attempts_without_snapshot = 0; // started, killed before any checkpoint or end
  double wall_s = 0, productive_s = 0, redone_s = 0;
  double goodput() const { return wall_s > 0 ? (productive_s - redone_s) / wall_s : 0.0; }
};

// The run's goodput from its events.jsonl objects, in file order.
RunGoodput run_goodput(const std::vector<nlohmann::json>& events);

// One line for the console: "goodput: 91.2% of 12.3 s (startup 0.8 s, ...); run: ..."
std::string goodput_line(const AttemptGoodput& attempt, const RunGoodput& run);

}  // namespace kiln::report
