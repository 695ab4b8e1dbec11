// The key-value store over MPI (kv_store.h): CTest runs this under `mpirun -np 3`. Every rank
// runs the same tests in the same order (each makes its own store: creating one is collective),
// from several threads at once, as the PJRT plugin calls it. Each test's store is closed by its
// destructor; one more store, made in main() and never destroyed, is closed by MPI_Finalize.
// A hang anywhere is caught by CTest's timeout.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kiln/backend/pjrt/kv_store.h"

namespace kiln::backend::pjrt {
namespace {

using std::chrono::milliseconds;

constexpr int kRanks = 3;
// Generous: only a broken store waits this long; a working one answers within milliseconds.
constexpr milliseconds kLongWait{20000};

std::unique_ptr<MpiKvStore> make_store() {
  Result<std::unique_ptr<MpiKvStore>> store = MpiKvStore::create();
  if (!store.ok()) {
    ADD_FAILURE() << store.status().to_string();
    return nullptr;
  }
  return std::move(*store);
}

std::string value_of(int rank, int thread) {
  // Values of several sizes, with bytes of every kind.
  std::string v = "rank " + std::to_string(rank) + " thread " + std::to_string(thread) + ":";
  for (int i = 0; i < 100 * (thread + 1); ++i) v.push_back(static_cast<char>((i * 31 + rank) % 256));
  return v;
}

TEST(MpiKvStore, ThreeRanks) {
  std::unique_ptr<MpiKvStore> store = make_store();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_ranks(), kRanks);
}

TEST(MpiKvStore, EveryThreadOfEveryRankReadsEveryKey) {
  std::unique_ptr<MpiKvStore> store = make_store();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string own = "r" + std::to_string(store->rank()) + "/t" + std::to_string(t);
      if (Status s = store->put(own, value_of(store->rank(), t)); !s.ok()) {
        failures[t] = s.to_string();
        return;
      }
      // Most keys are not there yet when asked for: the gets wait on rank 0.
      for (int r = 0; r < kRanks; ++r) {
        for (int u = 0; u < kThreads; ++u) {
          const std::string key = "r" + std::to_string(r) + "/t" + std::to_string(u);
          Result<std::string> v = store->get(key, kLongWait);
          if (!v.ok() || *v != value_of(r, u)) failures[t] += key + ": " + (v.ok() ? "wrong value" : v.status().to_string()) + "; ";
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "rank " << store->rank() << " thread " << t;
}

TEST(MpiKvStore, GetWaitsForAPutThatComesLater) {
  std::unique_ptr<MpiKvStore> store = make_store();
  ASSERT_NE(store, nullptr);
  if (store->rank() == 1) {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(store->put("late", "from rank 1").ok());
  }
  Result<std::string> v = store->get("late", kLongWait);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, "from rank 1");
}

TEST(MpiKvStore, GetTimesOutInOneLineNamingTheKeyAndRank) {
  std::unique_ptr<MpiKvStore> store = make_store();
  ASSERT_NE(store, nullptr);
  const std::string key = "nobody/puts/" + std::to_string(store->rank());
  Result<std::string> v = store->get(key, milliseconds(100));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
  const std::string& m = v.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m, "pjrt key-value store (rank " + std::to_string(store->rank()) + "): no rank put key '" + key +
                   "' within 100 ms (is a rank missing, or stuck before this point?)");
}

TEST(MpiKvStore, TryGetAnswersAtOnce) {
  std::unique_ptr<MpiKvStore> store = make_store();
  ASSERT_NE(store, nullptr);
  Result<std::string> missing = store->try_get("present/" + std::to_string(store->rank()));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store->put("present/" + std::to_string(store->rank()), "yes").ok());
  MPI_Barrier(MPI_COMM_WORLD);  // every put acknowledged, so stored on rank 0
  for (int r = 0; r < kRanks; ++r) {
    Result<std::string> v = store->try_get("present/" + std::to_string(r));
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(*v, "yes");
  }
}

TEST(MpiKvStore, LargeValuesCrossRanks) {
  // Past MPI's eager limits: the rendezvous path for requests and answers.
  std::unique_ptr<MpiKvStore> store = make_store();
  ASSERT_NE(store, nullptr);
  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 24);
  if (store->rank() == 2) {
    ASSERT_TRUE(store->put("big", big).ok());
  }
  Result<std::string> v = store->get("big", kLongWait);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_TRUE(*v == big);
}

}  // namespace
}  // namespace kiln::backend::pjrt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != kiln::backend::pjrt::kRanks) {
    std::fprintf(stderr, "run this under mpirun -np %d (got %d ranks)\n", kiln::backend::pjrt::kRanks, size);
    MPI_Finalize();
    return 1;
  }
  // A store left for MPI_Finalize to close, as the PJRT backend's is: it must not hang there,
  // nor leave its thread calling MPI afterwards.
  auto left = kiln::backend::pjrt::MpiKvStore::create();
  if (!left.ok() || !(*left)->put("left/" + std::to_string((*left)->rank()), "x").ok()) {
    std::fprintf(stderr, "the store left for MPI_Finalize failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int result = RUN_ALL_TESTS();
  MPI_Finalize();
  // The left store's destructor runs after MPI_Finalize here (as a static's would) and must
  // touch MPI no more.
  left = kiln::not_found("destroyed");
  return result;
}
