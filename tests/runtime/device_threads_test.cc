// runtime::DeviceThreads: the device threads a step runner keeps from one step to the next.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"

namespace kiln::runtime {
namespace {

TEST(DeviceThreads, EachDeviceRunsOnItsOwnThreadAndKeepsItAcrossCalls) {
  DeviceThreads threads(3);
  std::vector<std::thread::id> first(3), later(3);
  ASSERT_TRUE(threads.run([&](int64_t d) { first[d] = std::this_thread::get_id(); return ok_status(); }).ok());
  for (int call = 0; call < 5; ++call) {
    ASSERT_TRUE(threads.run([&](int64_t d) { later[d] = std::this_thread::get_id(); return ok_status(); }).ok());
    EXPECT_EQ(later, first) << "call " << call;
  }
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 3u);
  for (const auto& id : first) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(DeviceThreads, ThreadLocalStateLastsFromOneCallToTheNext) {
  // What a kernel keeps on its thread (its scratch, its in-flight collectives) must survive
  // between steps: a thread_local counter grows by one per call on every device.
  DeviceThreads threads(2);
  std::vector<int> seen(2);
  for (int call = 1; call <= 4; ++call) {
    ASSERT_TRUE(threads.run([&](int64_t d) {
                         thread_local int calls = 0;
                         seen[d] = ++calls;
                         return ok_status();
                       }).ok());
    EXPECT_EQ(seen, (std::vector<int>{call, call}));
  }
}

TEST(DeviceThreads, OneDeviceRunsOnTheCallingThreadWithItsOpenMpThreadsRestored) {
  DeviceThreads threads(1);
  const int before = omp_get_max_threads();
  std::thread::id ran;
  ASSERT_TRUE(threads.run([&](int64_t) { ran = std::this_thread::get_id(); return ok_status(); }).ok());
  EXPECT_EQ(ran, std::this_thread::get_id());
  EXPECT_EQ(omp_get_max_threads(), before);
}

TEST(DeviceThreads, EachDeviceGetsItsShareOfTheOpenMpThreads) {
  DeviceThreads threads(2);
  std::vector<int> got(2);
  ASSERT_TRUE(threads.run([&](int64_t d) { got[d] = omp_get_max_threads(); return ok_status(); }).ok());
  EXPECT_EQ(got, (std::vector<int>{threads_per_device(2), threads_per_device(2)}));
}

TEST(DeviceThreads, ReturnsTheFirstErrorByDeviceAndRunsAgainAfterIt) {
  DeviceThreads threads(3);
  Status s = threads.run([](int64_t d) -> Status {
    if (d >= 1) return invalid_argument("device {} failed", d);
    return ok_status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "device 1 failed");
  std::atomic<int> ran{0};
  EXPECT_TRUE(threads.run([&](int64_t) { ++ran; return ok_status(); }).ok());
  EXPECT_EQ(ran.load(), 3);
}

TEST(DeviceThreads, ACallFromADeviceThreadRunsOnFreshThreads) {
  // A device thread that runs the devices again (nested) must not wait for itself.
  DeviceThreads threads(2);
  std::atomic<int> inner{0};
  Status s = threads.run([&](int64_t d) -> Status {
    if (d != 0) return ok_status();
    return threads.run([&](int64_t) { ++inner; return ok_status(); });
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(inner.load(), 2);
}

TEST(DeviceThreads, CallsFromSeveralThreadsTakeTurns) {
  DeviceThreads threads(2);
  std::atomic<int> inside{0}, most{0}, calls{0};
  auto caller = [&] {
    for (int i = 0; i < 20; ++i) {
      Status s = threads.run([&](int64_t) {
        int now = ++inside;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --inside;
        ++calls;
        return ok_status();
      });
      EXPECT_TRUE(s.ok());
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(calls.load(), 2 * 20 * 2);
  EXPECT_LE(most.load(), 2);  // never more than one call's two devices at once
}

TEST(DeviceThreads, AFailedDeviceStopsTheOthersOfItsWorld) {
  // Device 0 waits in a collective device 1 never joins: the world's abort ends its wait
  // (the timeout, 120 s, would end it with another message).
  LocalWorld world(2, {.timeout_s = 120});
  DeviceThreads threads(2);
  Status waiter;
  Status s = threads.run(world, [&](int64_t d) -> Status {
    if (d == 1) return invalid_argument("device 1 ran out of data");
    std::vector<float> in(16, 1.0f), out(16);
    waiter = world.device(d).all_reduce({0, 1}, in.data(), out.data(), 16, ReduceDType::kF32)->wait();
    return waiter;
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "device 1: device 1 ran out of data");
  ASSERT_FALSE(waiter.ok());
  EXPECT_NE(waiter.message().find("stopped because device 1: device 1 ran out of data"), std::string::npos)
      << waiter.message();
}

}  // namespace
}  // namespace kiln::runtime
