// The in-process key-value store (kv_store.h) from many threads, its timeout and close, and
// the PJRT callbacks a plugin calls it through (value allocation and deleter, error codes).
// The MPI store has its own test under mpirun (kv_store_mpi_test.cc).
#include "kiln/backend/pjrt/kv_store.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace kiln::backend::pjrt {
namespace {

using std::chrono::milliseconds;

// Generous: only a broken store waits this long; a working one answers at once.
constexpr milliseconds kLongWait{20000};

TEST(LocalKvStore, ThreadsReadEachOthersKeys) {
  LocalKvStore store;
  constexpr int kThreads = 8;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (Status s = store.put("thread/" + std::to_string(t), "value " + std::to_string(t * 7)); !s.ok()) {
        failures[t] = s.to_string();
        return;
      }
      // Most of the others' keys are not there yet: get waits for them.
      for (int other = 0; other < kThreads; ++other) {
        Result<std::string> v = store.get("thread/" + std::to_string(other), kLongWait);
        if (!v.ok() || *v != "value " + std::to_string(other * 7)) {
          failures[t] += "thread/" + std::to_string(other) + ": " + (v.ok() ? *v : v.status().to_string()) + "; ";
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

TEST(LocalKvStore, GetWaitsForALaterPut) {
  LocalKvStore store;
  Result<std::string> got = not_found("not yet");
  std::thread waiter([&] { got = store.get("late", kLongWait); });
  std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(store.put("late", "here").ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "here");
}

TEST(LocalKvStore, GetTimesOutInOneLineNamingTheKey) {
  LocalKvStore store;
  Result<std::string> got = store.get("gpu:local_topology/cuda/3", milliseconds(50));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(got.status().message(), "pjrt key-value store: no process put key 'gpu:local_topology/cuda/3' within 50 ms");
}

TEST(LocalKvStore, TryGetAnswersAtOnceAndPutReplaces) {
  LocalKvStore store;
  Result<std::string> missing = store.try_get("k");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "pjrt key-value store: no key 'k'");
  ASSERT_TRUE(store.put("k", "one").ok());
  ASSERT_TRUE(store.put("k", "two").ok());
  Result<std::string> v = store.try_get("k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "two");
}

TEST(LocalKvStore, ValuesAreBytes) {
  LocalKvStore store;
  std::string bytes(1 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + 7) % 256);
  ASSERT_TRUE(store.put(std::string("key\0with nul", 12), bytes).ok());
  Result<std::string> v = store.get(std::string("key\0with nul", 12), kLongWait);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, bytes);
}

TEST(LocalKvStore, CloseWakesAWaitingGet) {
  LocalKvStore store;
  Result<std::string> got = std::string("not yet");
  std::thread waiter([&] { got = store.get("never", kLongWait); });
  std::this_thread::sleep_for(milliseconds(20));
  store.close();
  waiter.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store.put("after", "close").ok());
}

// The PJRT side: what a plugin sees. Its callback_error is faked: it records the code and
// message and hands back a marker.
struct PluginError {
  PJRT_Error_Code code = PJRT_Error_Code_OK;
  std::string message;
};
PluginError g_error;
int g_marker;
PJRT_Error* fake_callback_error(PJRT_Error_Code code, const char* message, size_t size) {
  g_error = {code, std::string(message, size)};
  return reinterpret_cast<PJRT_Error*>(&g_marker);
}
PJRT_CallbackError g_make_error = &fake_callback_error;

// A callback's arguments for `key`, as a plugin fills them (Args: the put, get or try-get ones).
template <typename Args>
Args callback_args(size_t struct_size, const std::string& key, void* user_arg) {
  Args args{};
  args.struct_size = struct_size;
  args.key = key.data();
  args.key_size = key.size();
  args.callback_error = &g_make_error;
  args.user_arg = user_arg;
  return args;
}

TEST(PjrtKvCallbacks, PutThenGetThroughThePluginsCallbacks) {
  LocalKvStore store;
  PjrtKvCallbacks callbacks(&store, "pjrt/xla_cuda_plugin.so/");
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  callbacks.install(create);
  ASSERT_NE(create.kv_get_callback, nullptr);
  ASSERT_NE(create.kv_try_get_callback, nullptr);
  ASSERT_NE(create.kv_put_callback, nullptr);

  const std::string key = "nccl_id/0", value("\x01\x00\x02id", 5);
  auto put = callback_args<PJRT_KeyValuePutCallback_Args>(PJRT_KeyValuePutCallback_Args_STRUCT_SIZE, key,
                                                          create.kv_put_user_arg);
  put.value = value.data();
  put.value_size = value.size();
  ASSERT_EQ(create.kv_put_callback(&put), nullptr);
  // Stored under the prefix: another plugin's "nccl_id/0" is another key.
  EXPECT_TRUE(store.try_get("pjrt/xla_cuda_plugin.so/nccl_id/0").ok());
  EXPECT_FALSE(store.try_get("nccl_id/0").ok());

  auto get = callback_args<PJRT_KeyValueGetCallback_Args>(PJRT_KeyValueGetCallback_Args_STRUCT_SIZE, key,
                                                          create.kv_get_user_arg);
  get.timeout_in_ms = 1000;
  ASSERT_EQ(create.kv_get_callback(&get), nullptr);
  ASSERT_NE(get.value_deleter_callback, nullptr);
  EXPECT_EQ(std::string(get.value, get.value_size), value);
  get.value_deleter_callback(get.value);  // what the plugin does once it has copied the value

  auto try_get = callback_args<PJRT_KeyValueTryGetCallback_Args>(PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE, key,
                                                                 create.kv_try_get_user_arg);
  ASSERT_EQ(create.kv_try_get_callback(&try_get), nullptr);
  EXPECT_EQ(std::string(try_get.value, try_get.value_size), value);
  try_get.value_deleter_callback(try_get.value);

  // An empty value is a value (a deleter comes with it too).
  put.value_size = 0;
  ASSERT_EQ(create.kv_put_callback(&put), nullptr);
  ASSERT_EQ(create.kv_get_callback(&get), nullptr);
  EXPECT_EQ(get.value_size, 0u);
  get.value_deleter_callback(get.value);
}

TEST(PjrtKvCallbacks, MissingKeysAreTheCodesXlaTestsFor) {
  LocalKvStore store;
  PjrtKvCallbacks callbacks(&store, "p/");
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  callbacks.install(create);
  const std::string key = "absent";

  auto try_get = callback_args<PJRT_KeyValueTryGetCallback_Args>(PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE, key,
                                                                 create.kv_try_get_user_arg);
  EXPECT_EQ(create.kv_try_get_callback(&try_get), reinterpret_cast<PJRT_Error*>(&g_marker));
  EXPECT_EQ(g_error.code, PJRT_Error_Code_NOT_FOUND);
  EXPECT_EQ(g_error.message, "pjrt key-value store: no key 'p/absent'");

  auto get = callback_args<PJRT_KeyValueGetCallback_Args>(PJRT_KeyValueGetCallback_Args_STRUCT_SIZE, key,
                                                          create.kv_get_user_arg);
  get.timeout_in_ms = 30;
  EXPECT_EQ(create.kv_get_callback(&get), reinterpret_cast<PJRT_Error*>(&g_marker));
  EXPECT_EQ(g_error.code, PJRT_Error_Code_DEADLINE_EXCEEDED);
  EXPECT_EQ(g_error.message, "pjrt key-value store: no process put key 'p/absent' within 30 ms");
}

}  // namespace
}  // namespace kiln::backend::pjrt
