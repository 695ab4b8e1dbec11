#include "kiln/train/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "kiln/base/check.h"

namespace kiln::train {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int64_t> g_signal_ns{0};  // steady clock at the first signal
std::atomic<bool> g_installed{false};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void write_stderr(const char* text) {
  // write(2) only: the handler may run inside malloc or stdio.
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_stop_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_signal_ns.store(now_ns());
    write_stderr(sig == SIGINT ? "kiln: interrupted (Ctrl-C): finishing the step and saving a checkpoint; "
                                 "interrupt again to stop at once\n"
                               : "kiln: SIGTERM: finishing the step and saving a checkpoint; "
                                 "a second signal stops at once\n");
    return;
  }
  write_stderr("kiln: second stop signal: exiting now (checkpoints already saved are kept)\n");
  ::_exit(128 + sig);
}

}  // namespace

PreemptionGuard::PreemptionGuard(double grace_s) {
  KILN_CHECK(!g_installed.exchange(true)) << "one PreemptionGuard at a time";
  g_signal.store(0);
  g_signal_ns.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write the signal lands in resumes
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGINT, &action, &previous_int_);
  if (grace_s > 0) {
    watchdog_ = std::thread([this, grace_s] {
      while (!done_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const int sig = g_signal.load();
        if (sig != 0 && seconds_since_request() > grace_s) {
          std::fprintf(stderr,
                       "kiln: the run did not stop within preemption_grace_s=%g s of the signal: exiting now "
                       "(checkpoints already saved are kept)\n",
                       grace_s);
          std::fflush(stderr);
          ::_exit(128 + sig);
        }
      }
    });
  }
}

PreemptionGuard::~PreemptionGuard() {
  done_.store(true);
  if (watchdog_.joinable()) watchdog_.join();
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
  g_installed.store(false);
}

int PreemptionGuard::requested() { return g_signal.load(); }

double PreemptionGuard::seconds_since_request() {
  const int64_t at = g_signal_ns.load();
  return at == 0 ? 0.0 : static_cast<double>(now_ns() - at) / 1e9;
}

}  // namespace kiln::train
