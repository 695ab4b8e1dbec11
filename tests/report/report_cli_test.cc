// `kiln report` as a user runs it: where it writes, one-line errors with exit code 2 for
// directories that are not runs, and --follow (re-renders as the run writes, stops at the
// finish event or on SIGTERM, and leaves a page that no longer reloads).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "tests/report/run_fixture.h"
#include "tests/testing/cli.h"

namespace {

using kiln::report::testing::fresh_dir;
using kiln::report::testing::RunFixture;
using kiln::report::testing::write_run;
using kiln::testing::CliRun;
using kiln::testing::read_text_file;

CliRun kiln(const std::string& args) { return kiln::testing::run_command(KILN_BINARY, "report " + args); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Polls `ok` every 50 ms for up to `seconds`.
bool eventually(const std::function<bool()>& ok, double seconds = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ok();
}

// `kiln report ARGS...` in the background, stdout to `log`.
pid_t start_kiln(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    (void)out;
    std::vector<char*> argv = {const_cast<char*>(KILN_BINARY), const_cast<char*>("report")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(KILN_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

// The exit code once the process ends within `seconds`, else -1 (and the process is killed).
int wait_exit(pid_t pid, double seconds) {
  int status = 0;
  if (!eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; }, seconds)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(KilnReportCli, WritesTheRunsPageAndSaysWhere) {
  const std::string dir = write_run(fresh_dir("cli") + "/run");
  CliRun r = kiln(dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "wrote " + dir + "/report.html  (file://")) << r.out;
  EXPECT_TRUE(has(read_text_file(dir + "/report.html"), "</html>"));
  // Several runs share the page named with -o.
  const std::string other = write_run(fresh_dir("cli2") + "/other");
  const std::string out = fresh_dir("cli3") + "/compare.html";
  r = kiln(dir + " " + other + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(read_text_file(out), "<title>Kiln report: run vs other</title>"));
}

TEST(KilnReportCli, DirectoriesThatAreNotRunsExitTwoWithOneLine) {
  const std::string root = fresh_dir("cli_bad");
  write_run(root + "/out/r1");
  CliRun r = kiln(root + "/missing");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "kiln: error: " + root + "/missing: no such directory\n");
  r = kiln(root + "/out");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "kiln: error: " + root + "/out: not a run directory (no metrics.jsonl or events.jsonl); the runs "
                   "below it: " + root + "/out/r1\n");
  r = kiln(root + "/out/r1 " + root + "/out/r1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "kiln: error: 2 run directories: name the page they share with -o OUT.html")) << r.err;
  r = kiln("--interval 1 " + root + "/out/r1");  // --interval needs --follow
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(root + "/out/r1/report.html"));
}

TEST(KilnReportCli, TornAndEmptyRunsStillGetAPage) {
  const std::string root = fresh_dir("cli_torn");
  const std::string torn = write_run(root + "/torn", RunFixture{.finished = false, .torn_tail = "{\"step\": 12, \"lo"});
  CliRun r = kiln(torn);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(read_text_file(torn + "/report.html"), "the last line is torn"));
  std::filesystem::create_directories(root + "/empty");
  std::ofstream(root + "/empty/metrics.jsonl");
  r = kiln(root + "/empty");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(read_text_file(root + "/empty/report.html"), "metrics.jsonl holds no steps yet"));
}

TEST(KilnReportCli, FollowRerendersUntilTheFinishEvent) {
  const std::string root = fresh_dir("follow");
  const std::string dir = write_run(root + "/run", RunFixture{.steps = 6, .finished = false});
  const std::string page = dir + "/report.html";
  pid_t pid = start_kiln({dir, "--follow", "--interval", "0.2"}, root + "/log");
  ASSERT_TRUE(eventually([&] { return has(read_text_file(page), "http-equiv=\"refresh\""); }));
  EXPECT_TRUE(has(read_text_file(page), "6 (steps 0–5)"));
  // New steps land on the page.
  {
    std::ofstream m(dir + "/metrics.jsonl", std::ios::app);
    for (int s = 6; s < 9; ++s) m << kiln::report::testing::metrics_line(s) << "\n";
  }
  EXPECT_TRUE(eventually([&] { return has(read_text_file(page), "9 (steps 0–8)"); })) << read_text_file(page);
  // The finish event ends it, with a page that no longer reloads.
  std::ofstream(dir + "/events.jsonl", std::ios::app) << "{\"time\": 1796162700, \"event\": \"finish\", \"step\": 9}\n";
  EXPECT_EQ(wait_exit(pid, 10), 0);
  const std::string last = read_text_file(page);
  EXPECT_FALSE(has(last, "http-equiv=\"refresh\""));
  EXPECT_TRUE(has(last, "finished at step 9"));
  const std::string log = read_text_file(root + "/log");
  EXPECT_TRUE(has(log, "following: " + page)) << log;
  EXPECT_TRUE(has(log, "stopped following: the run wrote its finish event; wrote the final page " + page)) << log;
}

TEST(KilnReportCli, FollowStopsOnSigterm) {
  const std::string root = fresh_dir("follow_term");
  const std::string dir = write_run(root + "/run", RunFixture{.steps = 3, .finished = false});
  const std::string out = root + "/live.html";
  pid_t pid = start_kiln({dir, "-o", out, "--follow", "--interval", "5"}, root + "/log");
  ASSERT_TRUE(eventually([&] { return has(read_text_file(out), "http-equiv=\"refresh\" content=\"5\""); }));
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 5), 0);  // at once, not after the 5 s interval
  EXPECT_FALSE(has(read_text_file(out), "http-equiv=\"refresh\""));
  EXPECT_TRUE(has(read_text_file(root + "/log"), "stopped following: stopped by SIGTERM")) << read_text_file(root + "/log");
}

}  // namespace
