// One writer per run directory (run_lock.h): a lock held by another process refuses a second
// trainer in one line naming the holder; it dies with its holder, kill -9 included; ranks
// lock apart. Then as a user meets it: a second `kiln train` on a live run's directory is
// refused before it writes, and the first run's records stay whole.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kiln/train/run_lock.h"
#include "tests/testing/cli.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

// A child process that takes the lock and waits to be killed; returns once it holds it.
pid_t hold_in_child(const std::string& dir, int64_t rank) {
  int ready[2];
  EXPECT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    auto lock = RunLock::acquire(dir, rank);
    const char ok = lock.ok() ? '1' : '0';
    (void)!write(ready[1], &ok, 1);
    while (true) pause();
  }
  close(ready[1]);
  char ok = 0;
  EXPECT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  EXPECT_EQ(ok, '1');
  return child;
}

TEST(RunLock, ASecondHolderIsRefusedUntilTheFirstDies) {
  const fs::path dir = testing::fresh_temp_dir("kiln_run_lock") / "run";
  const pid_t child = hold_in_child(dir.string(), 0);
  Result<std::unique_ptr<RunLock>> second = RunLock::acquire(dir.string(), 0);
  ASSERT_FALSE(second.ok());
  const std::string m = second.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find("run directory " + dir.string() + " is in use"), std::string::npos) << m;
  EXPECT_NE(m.find("pid " + std::to_string(child) + " on host"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  // Another rank's lock is its own.
  EXPECT_TRUE(RunLock::acquire(dir.string(), 1).ok());
  // kill -9: the kernel drops the lock with the process.
  ASSERT_EQ(kill(child, SIGKILL), 0);
  waitpid(child, nullptr, 0);
  Result<std::unique_ptr<RunLock>> third = RunLock::acquire(dir.string(), 0);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  std::ifstream in((*third)->path());
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("pid " + std::to_string(getpid())), std::string::npos) << line;  // the new holder's line
}

TEST(RunLock, ASecondKilnTrainOnALiveRunIsRefusedBeforeItWrites) {
  const fs::path out = testing::fresh_temp_dir("kiln_run_lock_cli");
  const std::string args = "train model_name=gpt-oss-tiny override_model_config=true per_device_batch_size=1 "
                           "max_target_length=32 base_num_decoder_layers=2 vocab_size=258 enable_checkpointing=false "
                           "run_name=run base_output_directory=" + out.string();
  const fs::path metrics = out / "run" / "metrics.jsonl";
  const pid_t first = fork();
  ASSERT_GE(first, 0);
  if (first == 0) {
    const std::string cmd = "exec " + std::string(KILN_BINARY) + " " + args + " steps=100000 >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  struct KillOnExit {  // a failed assertion must not leave a 100000-step run behind
    pid_t pid;
    ~KillOnExit() {
      if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
    }
  } guard{first};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto lines = [&] {
    std::ifstream in(metrics);
    int n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  };
  while (lines() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(lines(), 2) << "the first run did not start";
  testing::CliRun second = testing::run_command(KILN_BINARY, args + " steps=3");
  EXPECT_NE(second.exit_code, 0);
  EXPECT_EQ(std::count(second.err.begin(), second.err.end(), '\n'), 1) << second.err;
  EXPECT_NE(second.err.find("is in use"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("pid " + std::to_string(first)), std::string::npos) << second.err;
  ASSERT_EQ(kill(first, SIGKILL), 0);
  waitpid(first, nullptr, 0);
  guard.pid = -1;
  // The first run's records: steps 0, 1, 2, ... each once (the refused one wrote none).
  std::ifstream in(metrics);
  int expected = 0;
  for (std::string l; std::getline(in, l); ++expected) {
    if (l.find("\"step\": ") == std::string::npos) break;  // a line torn by the kill
    EXPECT_EQ(l.rfind("{\"step\": " + std::to_string(expected) + ",", 0), 0u) << l;
  }
  // With the holder gone, the directory is free again.
  testing::CliRun third = testing::run_command(KILN_BINARY, args + " steps=2");
  EXPECT_EQ(third.exit_code, 0) << third.err;
}

}  // namespace
}  // namespace kiln::train
