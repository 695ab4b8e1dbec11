// MpiWorld across processes: CTest runs this under `mpirun -np 2`, each rank driving 2
// virtual devices (global ids 0,1 on rank 0 and 2,3 on rank 1). Every rank runs the same
// tests in the same order, as SPMD programs do.
#include <cstdio>

#include <gtest/gtest.h>

#include "kiln/runtime/local_world.h"
#include "kiln/runtime/mpi_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/runtime/world.h"
#include "tests/runtime/collective_checks.h"

namespace kiln::runtime {
namespace {

MpiWorld* g_world = nullptr;
constexpr double kTestTimeoutS = 60;

TEST(MpiWorld, TwoRanksOfTwoDevicesMakeFourDevices) {
  EXPECT_EQ(g_world->num_ranks(), 2);
  EXPECT_EQ(g_world->local_devices(), 2);
  EXPECT_EQ(g_world->device(1).device(), g_world->rank() * 2 + 1);
  EXPECT_EQ(g_world->device(0).num_devices(), 4);
}

TEST(MpiWorld, EveryCollectiveWithinAndAcrossProcesses) {
  // Groups: [0,1] and [2,3] within a process, [0,2] and [1,3] across, [0,1,2,3] both.
  Status s = run_on_devices(*g_world, [&](int64_t local) {
    return testing::check_everything(g_world->device(local), /*inner=*/2);
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(MpiWorld, LargeMessagesAndFsdpDataGroupsAtOnce) {
  Status s = run_on_devices(*g_world, [&](int64_t local) -> Status {
    Collectives& c = g_world->device(local);
    KILN_RETURN_IF_ERROR(testing::check_all_gather(c, testing::outer_group(c.device(), 4, 2), 3 << 20, 5));
    for (uint64_t seed = 0; seed < 10; ++seed) {
      KILN_RETURN_IF_ERROR(testing::check_async_reverse_wait(c, testing::outer_group(c.device(), 4, 2),
                                                             testing::inner_group(c.device(), 2), seed));
    }
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(MpiWorld, AllReduceBitsMatchEveryDeviceAndTheThreadWorld) {
  // Rank-order sums over the same segments: MPI and shared memory give identical bits.
  for (ReduceDType t : {ReduceDType::kF32, ReduceDType::kBF16}) {
    std::vector<std::vector<uint8_t>> mpi_bits(2), gathered(4);
    Status s = run_on_devices(*g_world, [&](int64_t local) -> Status {
      KILN_ASSIGN_OR_RETURN(mpi_bits[local], testing::all_reduce_bits(g_world->device(local),
                                                                      {0, 1, 2, 3}, 50001, t, 11));
      return ok_status();
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    // Bring device 2's result to every device, to compare across processes too.
    std::vector<uint8_t> all(mpi_bits[0].size() * 4);
    s = run_on_devices(*g_world, [&](int64_t local) {
      std::vector<uint8_t> out(all.size());
      Status st = g_world->device(local).all_gather({0, 1, 2, 3}, mpi_bits[local].data(),
                                                    mpi_bits[local].size(), out.data())->wait();
      if (local == 0) all = out;
      return st;
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    std::vector<std::vector<uint8_t>> local_bits(4);
    LocalWorld threads(4, {.timeout_s = kTestTimeoutS});
    s = run_on_devices(threads, [&](int64_t d) -> Status {
      KILN_ASSIGN_OR_RETURN(local_bits[d], testing::all_reduce_bits(threads.device(d), {0, 1, 2, 3},
                                                                    50001, t, 11));
      return ok_status();
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    size_t bytes = mpi_bits[0].size();
    for (int d = 0; d < 4; ++d) {
      std::vector<uint8_t> dev(all.begin() + d * bytes, all.begin() + (d + 1) * bytes);
      EXPECT_EQ(dev, local_bits[0]) << "device " << d << " " << reduce_dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace kiln::runtime

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The helper the trainer uses: under mpirun with 2 ranks it must pick MPI.
  auto world = kiln::runtime::make_world(/*mesh_devices=*/4, /*local_devices=*/2,
                                         {.timeout_s = kiln::runtime::kTestTimeoutS});
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().to_string().c_str());
    return 1;
  }
  kiln::runtime::g_world = dynamic_cast<kiln::runtime::MpiWorld*>(world->get());
  if (kiln::runtime::g_world == nullptr) {
    std::fprintf(stderr, "make_world did not pick MPI under mpirun\n");
    return 1;
  }
  // Both ranks print their report (a failure may show on one rank only); mpirun fails when
  // either returns non-zero.
  return RUN_ALL_TESTS();
}
