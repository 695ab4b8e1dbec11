// Progress reporting for long phases (compile, tokenize, checkpoint save/restore, convert).
//
//   kiln::Progress progress("compile kernels", kernels.size());   // total 0 = unknown
//   for (auto& k : kernels) { compile(k); progress.advance(); }
//   progress.finish();                                             // or let it go out of scope
//
//   kiln::Progress bytes("restore checkpoint", total_bytes, kiln::Progress::Unit::kBytes);
//   bytes.advance(n_read);
//
// On a terminal the phase is one line redrawn in place ("\r"), at most 10 times a second:
//   restore checkpoint [#########.........] 512.0/1024.0 MiB 50% 210.3 MiB/s eta 2s
// When the stream is not a terminal (CI logs, pipes) it writes plain lines instead: one
// every `plain_interval_s` seconds (default 10) while the phase runs, and one at the end,
// so a short phase leaves exactly one line and logs stay grep-able:
//   restore checkpoint: 512.0/1024.0 MiB (50%) 210.3 MiB/s
//   restore checkpoint: done 1024.0 MiB in 4.9s (210.3 MiB/s)
//
// advance() is thread-safe (an atomic counter; only the thread that wins the time check
// draws), so OpenMP loops and worker threads may call it.
//
// KILN_PROGRESS=off silences every Progress, =plain forces plain lines, =tty forces redraws.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace kiln {

class Progress {
 public:
  enum class Unit { kItems, kBytes };
  enum class Mode { kAuto, kTerminal, kPlain, kOff };

  struct Options {
    Unit unit = Unit::kItems;
    Mode mode = Mode::kAuto;            // kAuto: KILN_PROGRESS, else isatty(stream)
    std::FILE* stream = nullptr;        // nullptr: stderr
    double plain_interval_s = 10.0;     // seconds between plain lines
    double redraw_interval_s = 0.1;     // seconds between terminal redraws
  };

  Progress(std::string label, int64_t total, Unit unit = Unit::kItems);
  Progress(std::string label, int64_t total, Options options);
  ~Progress();  // calls finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);
  void set(int64_t done);          // absolute position (e.g. bytes written so far)
  void set_total(int64_t total);   // when the total becomes known late
  // Prints the final "done" line once; later calls do nothing. `note` is appended to it
  // (e.g. "12 kernels cached").
  void finish(const std::string& note = "");

  int64_t done() const { return done_.load(std::memory_order_relaxed); }
  Mode mode() const { return mode_; }

  // The formatted amount ("512.0/1024.0 MiB", "3/10"), exposed for tests.
  static std::string format_amount(int64_t done, int64_t total, Unit unit);

 private:
  void maybe_draw(bool force);
  double elapsed_s() const;

  std::string label_;
  std::atomic<int64_t> total_;
  std::atomic<int64_t> done_{0};
  Options options_;
  Mode mode_;
  std::FILE* stream_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<double> last_draw_s_{-1e9};
  std::mutex draw_mu_;
  bool finished_ = false;
  bool drew_partial_ = false;  // a terminal line is on screen without a newline
};

}  // namespace kiln
