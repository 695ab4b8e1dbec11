// kiln supervise [--max_restarts N] [--restart_command "CMD"] -- COMMAND [ARGS...]
//
// Runs a training command (`kiln train ...`, or `mpiexec -n 4 kiln train ...`) and, when it
// fails, runs it again from the run's last checkpoint (starting a run whose directory holds a
// checkpoint resumes it), up to N times. With --restart_command the restarts run that shell
// command instead: the layout of the survivors when a host is gone (`mpiexec -n 2 ...
// local_devices=2`: checkpoints reshard on load, and the same global batch keeps the losses).
//
// What counts as a failure: any exit but 0 (done) and 2 (a usage error: a restart would fail
// the same way); 75 (preempted, preemption.h) is restarted too unless the supervisor itself
// received the stop signal. SIGTERM/SIGINT sent to the supervisor are passed on to the
// command and end the supervision after it exits. Each attempt gets KILN_ATTEMPT (1, 2, ...)
// and, from the second on, KILN_PREVIOUS_EXIT ("exit code 1", "signal 9") in its
// environment; the trainer records them as a `restart` event in events.jsonl, which the
// report page lists with the run's attempts.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "kiln/train/preemption.h"

namespace kiln::app {

namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop{0};

void forward_signal(int sig) {
  g_stop.store(sig);
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return "an unknown status";
}

// Runs argv (or, with `shell`, /bin/sh -c shell) with the attempt's environment; its wait status.
int run_attempt(const std::vector<std::string>& argv, const std::string& shell, int attempt, const std::string& previous) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("KILN_ATTEMPT", std::to_string(attempt).c_str(), 1);
    if (previous.empty()) {
      ::unsetenv("KILN_PREVIOUS_EXIT");
    } else {
      ::setenv("KILN_PREVIOUS_EXIT", previous.c_str(), 1);
    }
    if (!shell.empty()) {
      ::execl("/bin/sh", "sh", "-c", shell.c_str(), static_cast<char*>(nullptr));
    } else {
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
    }
    std::fprintf(stderr, "kiln: error: supervise: cannot run %s\n", shell.empty() ? argv[0].c_str() : "/bin/sh");
    ::_exit(127);
  }
  if (pid < 0) return -1;
  g_child.store(pid);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  g_child.store(0);
  return status;
}

}  // namespace

std::function<int()> add_supervise_command(CLI::App& cmd) {
  struct Options {
    int max_restarts = 3;
    std::string restart_command;
    std::vector<std::string> command;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("--max_restarts", opts->max_restarts, "restarts after a failure before giving up (default 3)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--restart_command", opts->restart_command,
                 "a shell command the restarts run instead of COMMAND (the survivors' layout)");
  cmd.add_option("command", opts->command, "the training command, after --")->required();
  return [opts]() -> int {
    struct sigaction action {};
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    std::string previous;
    for (int attempt = 1;; ++attempt) {
      const bool restart = attempt > 1 && !opts->restart_command.empty();
      if (attempt > 1) {
        std::printf("kiln supervise: attempt %d of %d after %s: %s\n", attempt, opts->max_restarts + 1,
                    previous.c_str(),
                    restart ? opts->restart_command.c_str() : fmt::format("{}", fmt::join(opts->command, " ")).c_str());
        std::fflush(stdout);
      }
      const int status = run_attempt(opts->command, restart ? opts->restart_command : "", attempt, previous);
      if (status < 0) return report_error(internal_error("supervise: cannot fork"));
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      if (code == kExitOk || code == kExitUsage) return code;
      if (g_stop.load() != 0) {
        std::printf("kiln supervise: stopped by signal %d; the command ended with %s\n", g_stop.load(),
                    describe(status).c_str());
        return code;
      }
      previous = describe(status);
      if (attempt > opts->max_restarts) {
        std::fprintf(stderr, "kiln: error: supervise: the command failed %d time(s), the last with %s; giving up "
                             "(--max_restarts=%d)\n",
                     attempt, previous.c_str(), opts->max_restarts);
        return code == train::kExitPreempted ? code : kExitFailure;
      }
    }
  };
}

}  // namespace kiln::app
