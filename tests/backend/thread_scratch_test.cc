// backend::cpu::thread_scratch: a kernel's scratch kept on its thread between calls.
#include "kiln/backend/cpu/kernels/thread_scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

namespace kiln::backend::cpu {
namespace {

TEST(ThreadScratch, KeepsTheBlockForRequestsUpToItsSizeAndGrowsPastIt) {
  float* a = thread_scratch<float>(ScratchSlot::kPack0, 1000);
  a[999] = 7.0f;
  float* again = thread_scratch<float>(ScratchSlot::kPack0, 10);
  EXPECT_EQ(again, a);  // smaller: the same block, not shrunk
  EXPECT_EQ(thread_scratch<float>(ScratchSlot::kPack0, 1000)[999], 7.0f);
  float* bigger = thread_scratch<float>(ScratchSlot::kPack0, 1 << 20);
  bigger[(1 << 20) - 1] = 1.0f;  // all of it is usable
  EXPECT_EQ(thread_scratch<float>(ScratchSlot::kPack0, 1000), bigger);
}

TEST(ThreadScratch, SlotsAndThreadsHaveTheirOwnBlocks) {
  auto* p0 = thread_scratch<uint32_t>(ScratchSlot::kPack0, 64);
  auto* p1 = thread_scratch<uint32_t>(ScratchSlot::kPack1, 64);
  EXPECT_NE(p0, p1);
  uint32_t* other = nullptr;
  std::thread([&] { other = thread_scratch<uint32_t>(ScratchSlot::kPack0, 64); }).join();
  EXPECT_NE(other, p0);
}

TEST(ThreadScratch, BlocksAreCacheLineAligned) {
  for (size_t n : {1u, 3u, 1000u, 123457u}) {
    auto address = reinterpret_cast<uintptr_t>(thread_scratch<float>(ScratchSlot::kAccumulate1, n));
    EXPECT_EQ(address % 64, 0u) << n;
  }
}

}  // namespace
}  // namespace kiln::backend::cpu
