// LocalWorld: every collective on 1, 2 and 4 virtual devices, concurrent groups of a 2x2
// mesh, async waits in reverse order, identical bits on every device, and failures that
// return errors instead of hanging (timeouts, a failed device, mismatched calls).
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/config/config.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/reduce.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/runtime/world.h"
#include "tests/runtime/collective_checks.h"

namespace kiln::runtime {
namespace {

using testing::check_everything;

// Keeps a test that would hang from hanging: collectives give up after this long.
constexpr double kTestTimeoutS = 30;

class LocalWorldDevices : public ::testing::TestWithParam<int64_t> {};

TEST_P(LocalWorldDevices, EveryCollectiveMatchesItsDefinition) {
  int64_t n = GetParam();
  LocalWorld world(n, {.timeout_s = kTestTimeoutS});
  int64_t inner = n == 4 ? 2 : n;  // 4 devices: a 2x2 mesh (fsdp groups, data groups, all)
  Status s = run_on_devices(world, [&](int64_t d) { return check_everything(world.device(d), inner); });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Runtime, LocalWorldDevices, ::testing::Values(1, 2, 4));

TEST(LocalWorld, FsdpAndDataGroupsOfA2x2MeshRunAtOnce) {
  // Devices [[0,1],[2,3]]: each device starts an all_gather over its fsdp group and an
  // all_reduce over its data group before waiting for either, in reverse order.
  LocalWorld world(4, {.timeout_s = kTestTimeoutS});
  Status s = run_on_devices(world, [&](int64_t d) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      KILN_RETURN_IF_ERROR(testing::check_async_reverse_wait(
          world.device(d), testing::inner_group(d, 2), testing::outer_group(d, 4, 2), seed));
    }
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(LocalWorld, AllReduceGivesIdenticalBitsOnEveryDeviceWhateverTheTiming) {
  for (ReduceDType t : {ReduceDType::kF32, ReduceDType::kBF16}) {
    std::vector<std::vector<uint8_t>> bits(4);
    LocalWorld world(4, {.timeout_s = kTestTimeoutS});
    Status s = run_on_devices(world, [&](int64_t d) -> Status {
      // Arrive in a different order than the ranks.
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * (3 - d)));
      KILN_ASSIGN_OR_RETURN(bits[d], testing::all_reduce_bits(world.device(d), {0, 1, 2, 3},
                                                              100003, t, 7));
      return ok_status();
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (int d = 1; d < 4; ++d) EXPECT_EQ(bits[d], bits[0]) << "device " << d << " " << reduce_dtype_name(t);
  }
}

TEST(LocalWorld, Bf16SumsAccumulateInF32AndRoundOnce) {
  // 1 + 3 × 2^-9: rounding after every add would stay at 1.0 (each 2^-9 is under half a bf16
  // ulp at 1); one rounding of the f32 sum gives 1 + 2^-7.
  uint16_t one = f32_to_bf16(1.0f), small = f32_to_bf16(1.0f / 512);
  std::vector<uint16_t> in[4] = {{one}, {small}, {small}, {small}};
  std::vector<uint16_t> out[4] = {{0}, {0}, {0}, {0}};
  LocalWorld world(4, {.timeout_s = kTestTimeoutS});
  Status s = run_on_devices(world, [&](int64_t d) {
    return world.device(d).all_reduce({0, 1, 2, 3}, in[d].data(), out[d].data(), 1, ReduceDType::kBF16)->wait();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int d = 0; d < 4; ++d) EXPECT_EQ(bf16_to_f32(out[d][0]), 1.0f + 1.0f / 128) << "device " << d;
}

TEST(LocalWorld, S32SumsWrapAround) {
  std::vector<int32_t> in[2] = {{INT32_MAX, -5}, {1, 3}};
  std::vector<int32_t> out[2] = {{0, 0}, {0, 0}};
  LocalWorld world(2, {.timeout_s = kTestTimeoutS});
  Status s = run_on_devices(world, [&](int64_t d) {
    return world.device(d).all_reduce({0, 1}, in[d].data(), out[d].data(), 2, ReduceDType::kS32)->wait();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(out[1][0], INT32_MIN);
  EXPECT_EQ(out[1][1], -2);
}

TEST(LocalWorld, DeviceThatNeverArrivesTimesOutWithItsName) {
  LocalWorld world(2, {.timeout_s = 0.3});
  auto start = std::chrono::steady_clock::now();
  Status s = run_on_devices(2, [&](int64_t d) -> Status {
    if (d == 1) return ok_status();  // never calls the collective
    float in = 1, out[2];
    return world.device(0).all_gather({0, 1}, &in, sizeof in, out)->wait();
  });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "all_gather over devices [0,1] timed out after 0.3 s waiting for device 1 (is a rank dead?)");
  EXPECT_LT(seconds, 10);
  EXPECT_GE(world.device(0).wait_seconds(), 0.29);  // the time blocked counts as exposed
  EXPECT_EQ(world.device(1).wait_seconds(), 0);
}

// A device that started a collective and then computes does not hold its peers up: device
// 1's wait returns while device 0 has not waited yet. With progress() between device 0's
// kernels, device 0 reads its own part there; without it, device 1, blocked in its wait, does
// device 0's read for it (into device 0's out), so device 0 finds its result already in
// place when it comes to wait.
TEST(LocalWorld, APeerThatComputesDoesNotHoldUpTheWaitingDevice) {
  for (bool progress : {true, false}) {
    LocalWorld world(2, {.timeout_s = 5});
    std::atomic<bool> peer_done{false}, zero_started{false};
    Status peer_status;
    float zero_out_before_wait[2] = {0, 0};
    Status s = run_on_devices(2, [&](int64_t d) -> Status {
      float in = static_cast<float>(d + 1), out[2] = {0, 0};
      // Device 1 starts second: had it started first, device 0's own start call would find
      // every member there and read at once.
      while (d == 1 && !zero_started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto pending = world.device(d).all_gather({0, 1}, &in, sizeof in, out);
      if (d == 0) zero_started = true;
      if (d == 1) {
        peer_status = pending->wait();
        peer_done = true;
        return ok_status();
      }
      // "Compute" until the peer is done or 2 s passed, calling progress() between kernels.
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!peer_done && std::chrono::steady_clock::now() < until) {
        if (progress) world.device(0).progress();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!peer_done) return internal_error("device 1 still waits for device 0");
      zero_out_before_wait[0] = out[0];  // ordered after device 1's writes by peer_done
      zero_out_before_wait[1] = out[1];
      KILN_RETURN_IF_ERROR(pending->wait());
      if (out[0] != 1 || out[1] != 2) return internal_error("gathered {} {}", out[0], out[1]);
      return ok_status();
    });
    EXPECT_TRUE(s.ok()) << "progress=" << progress << ": " << s.to_string();
    EXPECT_TRUE(peer_status.ok()) << peer_status.to_string();
    EXPECT_LT(world.device(1).wait_seconds(), 1.0);
    if (!progress) {
      EXPECT_EQ(zero_out_before_wait[0], 1) << "device 1 should have done device 0's read";
      EXPECT_EQ(zero_out_before_wait[1], 2);
    }
  }
}

TEST(LocalWorld, AFailedDeviceStopsTheOthersAtOnce) {
  // Device 2 fails before its collective; the others must not wait out the (long) timeout:
  // the world's abort ends their waits (the timeout would end them with another message).
  LocalWorld world(4, {.timeout_s = 120});
  std::vector<Status> waits(4);
  Status s = run_on_devices(world, [&](int64_t d) -> Status {
    if (d == 2) return invalid_argument("device 2 ran out of data");
    std::vector<float> in(64, 1.0f), out(64);
    waits[d] = world.device(d).all_reduce({0, 1, 2, 3}, in.data(), out.data(), 64, ReduceDType::kF32)->wait();
    return waits[d];
  });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "device 2: device 2 ran out of data");
  for (int64_t d : {0, 1, 3}) {
    ASSERT_FALSE(waits[d].ok()) << "device " << d;
    EXPECT_NE(waits[d].message().find("stopped because device 2: device 2 ran out of data"), std::string::npos)
        << "device " << d << ": " << waits[d].message();
  }
}

TEST(LocalWorld, MembersCallingDifferentCollectivesIsAnError) {
  LocalWorld world(2, {.timeout_s = kTestTimeoutS});
  std::vector<Status> got(2);
  Status s = run_on_devices(2, [&](int64_t d) {
    std::vector<float> in(8, 1.0f), out(16);
    got[d] = d == 0 ? world.device(d).all_gather({0, 1}, in.data(), 32, out.data())->wait()
                    : world.device(d).all_reduce({0, 1}, in.data(), out.data(), 8, ReduceDType::kF32)->wait();
    return ok_status();
  });
  ASSERT_TRUE(s.ok());
  for (const Status& g : got) {
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.message().find("every member must call the same collectives"), std::string::npos)
        << g.message();
  }
}

TEST(LocalWorld, BadGroupsAreErrors) {
  LocalWorld world(2, {.timeout_s = kTestTimeoutS});
  float in = 0, out[2];
  Status s = world.device(0).all_gather({1}, &in, 4, out)->wait();
  EXPECT_EQ(s.message(), "all_gather over devices [1] on device 0: device 0 is not a member");
  s = world.device(0).all_gather({0, 0}, &in, 4, out)->wait();
  EXPECT_EQ(s.message(), "all_gather over devices [0,0] on device 0: device 0 appears twice");
  s = world.device(0).all_gather({0, 5}, &in, 4, out)->wait();
  EXPECT_EQ(s.message(), "all_gather over devices [0,5] on device 0: device 5 is not in this world of 2 devices");
}

TEST(RunOnDevices, EachDeviceGetsItsShareOfTheThreads) {
  int saved = omp_get_max_threads();
  omp_set_num_threads(8);
  std::vector<int> seen(4);
  Status s = run_on_devices(4, [&](int64_t d) {
    seen[d] = omp_get_max_threads();
    return ok_status();
  });
  ASSERT_TRUE(s.ok());
  for (int t : seen) EXPECT_EQ(t, 2);
  EXPECT_EQ(threads_per_device(16), 1);
  EXPECT_EQ(threads_per_device(3), 2);
  omp_set_num_threads(saved);
}

TEST(CollectiveTimeout, EnvironmentVariableIsReadAndChecked) {
  ::setenv("KILN_COLLECTIVE_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(*resolve_timeout_s({}), 2.5);
  EXPECT_EQ(*resolve_timeout_s({.timeout_s = 7}), 7);
  ::setenv("KILN_COLLECTIVE_TIMEOUT_S", "soon", 1);
  Result<double> bad = resolve_timeout_s({});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "KILN_COLLECTIVE_TIMEOUT_S=soon: expected a positive number of seconds (default 600)");
  ::unsetenv("KILN_COLLECTIVE_TIMEOUT_S");
  EXPECT_EQ(*resolve_timeout_s({}), 600);
}

TEST(RuntimeMakeWorld, PicksVirtualDevicesWithoutMpirunAndChecksTheMesh) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMI_SIZE");
  Result<std::unique_ptr<World>> w = make_world(4, 4);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ((*w)->num_devices(), 4);
  EXPECT_EQ((*w)->num_ranks(), 1);
  EXPECT_NE(dynamic_cast<LocalWorld*>(w->get()), nullptr);

  Result<std::unique_ptr<World>> bad = make_world(4, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "the mesh has 4 devices but this run has 1 rank × local_devices=2 = 2; set the "
            "ici_*/dcn_* sizes, local_devices or mpirun -np to agree");

  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  bad = make_world(8, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("2 ranks × local_devices=2 = 4"), std::string::npos);
  ::setenv("OMPI_COMM_WORLD_SIZE", "two", 1);
  EXPECT_EQ(launcher_num_ranks().status().message(),
            "OMPI_COMM_WORLD_SIZE=two: expected a positive number of ranks");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST(RuntimeMakeWorld, FromAConfigUsesItsMeshAndLocalDevices) {
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMI_SIZE");
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  lo.overrides = {"local_devices=4", "ici_fsdp_parallelism=2", "ici_data_parallelism=2"};
  Result<config::Config> c = config::load(lo);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Result<std::unique_ptr<World>> w = make_world(*c);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ((*w)->local_devices(), 4);
  EXPECT_EQ((*w)->device(3).device(), 3);
}

}  // namespace
}  // namespace kiln::runtime
