// The key-value store a PJRT client shares with the other processes of its job. XLA's GPU
// plugin, given node_id, num_nodes and the store's callbacks at PJRT_Client_Create, puts each
// node's local topology there and waits for the others' (the job's global device list), and
// later exchanges NCCL's unique ids the same way; Kiln serves the store over its own MPI world,
// so `mpirun` across hosts is all a multi-host run needs (no coordinator address or port).
//
// Values are byte strings. get() blocks until some process has put the key or the timeout
// passes; try_get() answers at once. Every call may come from any thread, at any time: the
// plugin calls from its own threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kiln/base/status.h"
#include "pjrt_c_api.h"

namespace kiln::backend::pjrt {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Sets `key` (a later put of the same key replaces the value); visible to every process's
  // get once this returns.
  virtual Status put(std::string_view key, std::string_view value) = 0;
  // The value of `key`, waiting up to `timeout` for a process to put it. Not found (one line
  // naming the key and the wait) when none did; failed precondition once the store is closed.
  virtual Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // The value of `key` now, or not found naming the key.
  virtual Result<std::string> try_get(std::string_view key) = 0;
};

// One process's store: a map and a condition variable. What a single-host run serves its
// plugin, so that one host and many take the same path through the client.
class LocalKvStore final : public KvStore {
 public:
  Status put(std::string_view key, std::string_view value) override;
  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override;
  Result<std::string> try_get(std::string_view key) override;
  // Wakes every waiting get with an error; later calls fail. Idempotent.
  void close();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> values_;
  bool closed_ = false;
};

// The job's store over MPI. Rank 0 holds the map (a LocalKvStore) and a service thread that
// answers the other ranks' requests, point-to-point on a communicator of its own (a duplicate
// of MPI_COMM_WORLD, so its messages never meet Kiln's collectives): a put is acknowledged
// once stored, a get answered when its key arrives or its timeout passes. Other ranks send a
// request from the calling thread and wait for the answer under a tag of the request's own,
// so concurrent calls from many threads never take each other's answers. Rank 0's own calls
// go to the map directly.
//
// Shutdown: close() (the destructor, or MPI_Finalize, whichever comes first: the store hangs
// an attribute on MPI_COMM_SELF, whose deletion MPI_Finalize runs while MPI still works) ends
// the store on this rank: other ranks tell rank 0 they are done, and rank 0 serves until every
// rank has (or 10 s have passed), then stops its thread. So exit never waits on the thread,
// and the thread never calls MPI after MPI_Finalize.
class MpiKvStore final : public KvStore {
 public:
  // Collective over MPI_COMM_WORLD (every rank calls it, in the same order as its other
  // collectives). MPI must be initialised with MPI_THREAD_MULTIPLE (runtime::MpiWorld does):
  // the plugin calls from threads of its own. Errors (one line): MPI not initialised, a lower
  // thread level, an MPI call failing.
  static Result<std::unique_ptr<MpiKvStore>> create();
  ~MpiKvStore() override;
  MpiKvStore(const MpiKvStore&) = delete;
  MpiKvStore& operator=(const MpiKvStore&) = delete;

  int rank() const;
  int num_ranks() const;

  Status put(std::string_view key, std::string_view value) override;
  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override;
  Result<std::string> try_get(std::string_view key) override;
  // Ends the store on this rank (see above). Idempotent.
  void close();

  struct Impl;

 private:
  MpiKvStore();
  std::unique_ptr<Impl> impl_;
};

// A store as the PJRT_Client_Create callbacks (kv_get, kv_try_get, kv_put), with every key
// under `prefix`: the header leaves it to the caller to keep different users of one store
// (plugins, clients) apart. Must outlive the client it is given to.
class PjrtKvCallbacks {
 public:
  PjrtKvCallbacks(KvStore* store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  // Sets args' kv_get/kv_try_get/kv_put callbacks and user args to this object. A value the
  // plugin gets is allocated here and freed by the deleter handed back with it; an error is
  // made by the plugin's callback_error: NOT_FOUND when try_get finds nothing (the code XLA
  // tests for), DEADLINE_EXCEEDED when get waited in vain.
  void install(PJRT_Client_Create_Args& args);

 private:
  static PJRT_Error* get(PJRT_KeyValueGetCallback_Args* args);
  static PJRT_Error* try_get(PJRT_KeyValueTryGetCallback_Args* args);
  static PJRT_Error* put(PJRT_KeyValuePutCallback_Args* args);
  std::string key(const char* data, size_t size) const { return prefix_ + std::string(data, size); }

  KvStore* store_;
  std::string prefix_;
};

}  // namespace kiln::backend::pjrt
