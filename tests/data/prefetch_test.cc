// The background prefetcher: batches come out in index order at every depth, are built on
// another thread (depth > 0) or inline (depth 0), never run more than `depth` ahead of the
// consumer, and destroying it with batches pending returns.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kiln/data/prefetch.h"

namespace kiln::data {
namespace {

TEST(Prefetcher, BatchesComeOutInOrderAtEveryDepth) {
  for (int64_t depth : {0, 1, 3}) {
    Prefetcher<int64_t> p([](int64_t k) { return 10 * k; }, /*first=*/5, depth);
    for (int64_t k = 5; k < 25; ++k) EXPECT_EQ(p.next(), 10 * k) << "depth " << depth;
  }
}

TEST(Prefetcher, BuildsOnItsOwnThreadAndStaysAtMostDepthAhead) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> produced{0};
  std::atomic<bool> other_thread{true};
  {
    Prefetcher<int64_t> p(
        [&](int64_t k) {
          if (std::this_thread::get_id() == caller) other_thread = false;
          ++produced;
          return k;
        },
        0, /*depth=*/2);
    double wait_s = -1;
    EXPECT_EQ(p.next(&wait_s), 0);
    EXPECT_GE(wait_s, 0.0);
    // Give the thread time to fill the queue: it holds at most 2 ready batches, plus the
    // one it may be building when the queue has room.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_LE(produced.load(), 1 + 2);
    EXPECT_GE(produced.load(), 2);  // it did work ahead
    EXPECT_EQ(p.next(), 1);
    EXPECT_EQ(p.next(), 2);
  }  // destroyed with a batch pending
  EXPECT_TRUE(other_thread.load());

  // depth 0: built inside next(), on the caller's thread.
  bool inline_call = false;
  Prefetcher<int64_t> sync([&](int64_t k) { inline_call = std::this_thread::get_id() == caller; return k; }, 0, 0);
  EXPECT_EQ(sync.next(), 0);
  EXPECT_TRUE(inline_call);
}

}  // namespace
}  // namespace kiln::data
