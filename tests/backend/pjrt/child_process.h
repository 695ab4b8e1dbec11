// Runs a piece of a test in a child process, for code that can kill its process instead of
// returning an error: an XLA plugin aborts or segfaults on some malformed programs
// (spec/pjrt.md, "Hazards"). The child is forked before the parent ever loads the plugin, so
// the test process itself never holds one.
//
//   ChildResult r = run_in_child_returning([&] {
//     ... load the plugin, compile, run (EXPECT_* work here) ...
//     return printed_results;               // comes back as r.output
//   });
//   ASSERT_TRUE(child_succeeded(r));        // names a signal, a timeout or the child's failures
//
// In the child, gtest failures (EXPECT_*, ASSERT_*, ADD_FAILURE) are recorded instead of
// printed; the child then exits with kChildFailed and the parent gets them, one per line, in
// ChildResult::failures (child_succeeded reports them). An uncaught exception exits with
// kChildThrew. ASSERT_* returns from the body, so it can be used in a body returning void
// (run_in_child) but not in one returning the payload (the usual gtest rule).
#pragma once

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <string_view>

namespace kiln::backend::pjrt::testing {

inline constexpr int kChildFailed = 1;  // a gtest assertion failed in the child
inline constexpr int kChildThrew = 2;   // the body threw

struct ChildResult {
  bool started = false;    // false when pipe() or fork() failed (see failures)
  int exit_code = -1;      // the child's exit code, when it exited
  int signal = 0;          // the signal that killed it, when one did
  bool timed_out = false;  // it ran past its time and was killed (signal is then SIGKILL)
  int timeout_seconds = 0;
  std::string output;      // what the child wrote to out_fd (the payload)
  std::string failures;    // the child's gtest failures, "file:line: message" per line

  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // "exited with code 0", "killed by signal 11 (Segmentation fault)", ...
  std::string describe() const {
    if (!started) return "the child did not start";
    if (timed_out) return "the child ran past " + std::to_string(timeout_seconds) + " s and was killed";
    if (signal != 0) return "the child was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "the child exited with code " + std::to_string(exit_code);
  }
};

// Writes all of `bytes` to `fd` (retrying short writes); false on error.
inline bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace internal {

// The child's side: runs `body`, sends its gtest failures down `report_fd`, exits.
[[noreturn]] inline void child_main(const std::function<void(int)>& body, int out_fd, int report_fd) {
  int code = 0;
  std::string failures;
  {
    ::testing::TestPartResultArray results;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &results);
      try {
        body(out_fd);
      } catch (const std::exception& e) {
        failures += std::string("uncaught exception: ") + e.what() + "\n";
        code = kChildThrew;
      } catch (...) {
        failures += "uncaught exception of unknown type\n";
        code = kChildThrew;
      }
    }
    for (int i = 0; i < results.size(); ++i) {
      const ::testing::TestPartResult& r = results.GetTestPartResult(i);
      if (!r.failed()) continue;
      failures += std::string(r.file_name() != nullptr ? r.file_name() : "?") + ":" + std::to_string(r.line_number()) +
                  ": " + r.message() + "\n";
      if (code == 0) code = kChildFailed;
    }
  }
  write_all(report_fd, failures);
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);  // no atexit handlers or static destructors: they belong to the parent's state
}

// Reads both pipes to their end (or the deadline), so a child filling one of them never
// blocks. Returns false at the deadline.
inline bool drain(int out_fd, int report_fd, std::string& out, std::string& report,
                  std::chrono::steady_clock::time_point deadline) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {report_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &report};
  int open = 2;
  char chunk[65536];
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    int ready = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return true;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;  // end of file: poll ignores negative fds
        --open;
      } else {
        sinks[i]->append(chunk, static_cast<size_t>(n));
      }
    }
  }
  return true;
}

}  // namespace internal

// Forks; the child runs `body(out_fd)` and exits 0 (or kChildFailed / kChildThrew); the parent
// collects what it wrote, its failures, and how it ended. A child still running after
// `timeout_seconds` is killed (SIGKILL) and reported as timed out.
inline ChildResult run_in_child(const std::function<void(int out_fd)>& body, int timeout_seconds = 300) {
  ChildResult result;
  result.timeout_seconds = timeout_seconds;
  int out_pipe[2], report_pipe[2];
  if (::pipe(out_pipe) != 0) {
    result.failures = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (::pipe(report_pipe) != 0) {
    result.failures = std::string("pipe: ") + std::strerror(errno);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return result;
  }
  // Anything buffered now would be written twice, once by each process.
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out_pipe[0]);
    ::close(report_pipe[0]);
    internal::child_main(body, out_pipe[1], report_pipe[1]);
  }
  ::close(out_pipe[1]);
  ::close(report_pipe[1]);
  if (pid < 0) {
    result.failures = std::string("fork: ") + std::strerror(errno);
    ::close(out_pipe[0]);
    ::close(report_pipe[0]);
    return result;
  }
  result.started = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  if (!internal::drain(out_pipe[0], report_pipe[0], result.output, result.failures, deadline)) {
    result.timed_out = true;
    ::kill(pid, SIGKILL);
  }
  ::close(out_pipe[0]);
  ::close(report_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

// The same for a body that returns its payload: the returned string becomes ChildResult::output.
inline ChildResult run_in_child_returning(const std::function<std::string()>& body, int timeout_seconds = 300) {
  return run_in_child([&body](int out_fd) { write_all(out_fd, body()); }, timeout_seconds);
}

// For EXPECT_TRUE / ASSERT_TRUE: success, or how the child ended with its failures.
inline ::testing::AssertionResult child_succeeded(const ChildResult& r) {
  if (r.ok()) return ::testing::AssertionSuccess();
  ::testing::AssertionResult failure = ::testing::AssertionFailure() << r.describe();
  if (!r.failures.empty()) failure << "; its failures:\n" << r.failures;
  return failure;
}

}  // namespace kiln::backend::pjrt::testing
