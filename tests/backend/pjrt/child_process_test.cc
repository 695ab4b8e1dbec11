// The child-process harness the plugin tests run in: payloads come back, gtest failures in
// the child become the parent's, and a child killed by a signal or a timeout is reported with
// the signal named.
#include "tests/backend/pjrt/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace kiln::backend::pjrt::testing {
namespace {

TEST(ChildProcess, PayloadComesBack) {
  ChildResult r = run_in_child_returning([] { return std::string("hello from ") + std::to_string(getpid()); });
  ASSERT_TRUE(child_succeeded(r));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.output.starts_with("hello from ")) << r.output;
  EXPECT_NE(r.output, "hello from " + std::to_string(getpid()));  // another process wrote it
}

TEST(ChildProcess, LargePayloadDoesNotDeadlock) {
  // More than a pipe holds (64 KiB), so the parent must read while the child writes.
  ChildResult r = run_in_child_returning([] { return std::string(1 << 20, 'x'); });
  ASSERT_TRUE(child_succeeded(r));
  EXPECT_EQ(r.output.size(), size_t{1} << 20);
}

TEST(ChildProcess, ExpectationFailuresInTheChildComeBackAsFailures) {
  ChildResult r = run_in_child([](int) {
    EXPECT_EQ(1 + 1, 3) << "arithmetic";
    ADD_FAILURE() << "second failure";
  });
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code, kChildFailed);
  EXPECT_NE(r.failures.find("arithmetic"), std::string::npos) << r.failures;
  EXPECT_NE(r.failures.find("second failure"), std::string::npos) << r.failures;
  EXPECT_NE(r.failures.find("child_process_test.cc:"), std::string::npos) << r.failures;
  EXPECT_FALSE(child_succeeded(r));
}

TEST(ChildProcess, AssertStopsTheChildBody) {
  ChildResult r = run_in_child([](int fd) {
    ASSERT_TRUE(false) << "stop here";
    write_all(fd, "not reached");
  });
  EXPECT_EQ(r.exit_code, kChildFailed);
  EXPECT_EQ(r.output, "");
  EXPECT_NE(r.failures.find("stop here"), std::string::npos) << r.failures;
}

TEST(ChildProcess, ExceptionIsAFailure) {
  ChildResult r = run_in_child([](int) { throw std::runtime_error("boom"); });
  EXPECT_EQ(r.exit_code, kChildThrew);
  EXPECT_NE(r.failures.find("boom"), std::string::npos) << r.failures;
}

TEST(ChildProcess, DeathBySignalIsReportedWithTheSignalNamed) {
  ChildResult r = run_in_child([](int) { std::abort(); });
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.signal, SIGABRT);
  EXPECT_NE(r.describe().find("signal 6 (Aborted)"), std::string::npos) << r.describe();
  ::testing::AssertionResult verdict = child_succeeded(r);
  EXPECT_FALSE(verdict);
  EXPECT_NE(std::string(verdict.message()).find("Aborted"), std::string::npos) << verdict.message();
}

TEST(ChildProcess, HangingChildIsKilledAtTheTimeout) {
  ChildResult r = run_in_child([](int) { pause(); }, /*timeout_seconds=*/1);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_NE(r.describe().find("ran past 1 s"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace kiln::backend::pjrt::testing
