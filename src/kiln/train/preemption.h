// Preemption: what a scheduler's SIGTERM (or a person's Ctrl-C) does to a training run.
//
// The first SIGTERM or SIGINT asks the run to stop: the trainer finishes the step it is in,
// every rank agrees on that step (StepRunner::max_over_ranks: a signal that reached one rank
// stops them all at the same step), writes a checkpoint synchronously with the data iterator,
// flushes its records and exits with kExitPreempted. A second signal exits at once (128 +
// signal, as a shell reports a death by signal): checkpoints are written to a temporary
// directory and renamed, and records are appended line by line, so nothing already saved is
// lost or damaged. If the orderly stop has not finished `grace_s` seconds after the first
// signal (preemption_grace_s: set it below the scheduler's own grace period), a watchdog ends
// the process the same way.
#pragma once

#include <atomic>
#include <csignal>
#include <thread>

namespace kiln::train {

// The exit code of a run that stopped for a preemption signal after saving its state
// (EX_TEMPFAIL: try again later). Schedulers and `max_restarts` resume such a run.
inline constexpr int kExitPreempted = 75;

// Installs the SIGTERM and SIGINT handlers for its lifetime (the previous ones come back when
// it is destroyed) and runs the grace watchdog. One at a time per process.
class PreemptionGuard {
 public:
  explicit PreemptionGuard(double grace_s);
  ~PreemptionGuard();
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;

  // The first stop signal received (SIGTERM or SIGINT), 0 when none has arrived.
  static int requested();
  // Seconds since the first stop signal (0 when none).
  static double seconds_since_request();

 private:
  struct sigaction previous_term_{}, previous_int_{};
  std::atomic<bool> done_{false};
  std::thread watchdog_;
};

}  // namespace kiln::train
