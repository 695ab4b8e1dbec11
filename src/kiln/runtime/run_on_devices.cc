#include "kiln/runtime/run_on_devices.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kiln/base/check.h"

namespace kiln::runtime {

int threads_per_device(int64_t num_devices) {
  return std::max<int>(1, omp_get_max_threads() / static_cast<int>(std::max<int64_t>(1, num_devices)));
}

struct DeviceThreads::State {
  std::mutex turn;  // one call at a time
  std::mutex mu;
  std::condition_variable work, done;
  const std::function<void(int64_t)>* job = nullptr;  // the current call's body, under mu
  uint64_t generation = 0;                             // calls so far, under mu
  int64_t running = 0;                                 // workers still in the current call
  bool stop = false;
  std::vector<std::thread> workers;

  // Runs body(d) on worker d for every device and returns when all have finished.
  void dispatch(const std::function<void(int64_t)>& body) {
    std::lock_guard<std::mutex> one(turn);
    std::unique_lock<std::mutex> lock(mu);
    job = &body;
    running = static_cast<int64_t>(workers.size());
    ++generation;
    work.notify_all();
    done.wait(lock, [&] { return running == 0; });
    job = nullptr;
  }

  void serve(int64_t d) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t)>* body = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu);
        work.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        body = job;
      }
      (*body)(d);
      std::lock_guard<std::mutex> lock(mu);
      if (--running == 0) done.notify_all();
    }
  }
};

namespace {

// The DeviceThreads whose worker this thread is, if any.
thread_local const DeviceThreads::State* tls_worker_of = nullptr;

Status run_threads(int64_t num_devices, const std::function<Status(int64_t)>& fn,
                   const std::function<void(int64_t, const Status&)>& on_error, DeviceThreads::State* kept) {
  int threads = threads_per_device(num_devices);
  std::vector<Status> results(num_devices);
  std::function<void(int64_t)> body = [&](int64_t d) {
    omp_set_num_threads(threads);  // per thread: this device's OpenMP regions and oneDNN calls
    results[d] = fn(d);
    if (!results[d].ok()) on_error(d, results[d]);
  };
  if (num_devices == 1) {
    int saved = omp_get_max_threads();
    body(0);
    omp_set_num_threads(saved);
  } else if (kept != nullptr && tls_worker_of != kept) {
    kept->dispatch(body);
  } else {
    std::vector<std::thread> workers;
    workers.reserve(num_devices);
    for (int64_t d = 0; d < num_devices; ++d) workers.emplace_back(body, d);
    for (auto& t : workers) t.join();
  }
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return ok_status();
}

// on_error for a world: the first failure aborts the world's collectives and is kept.
struct FirstFailure {
  World& world;
  std::mutex mu;
  Status first;
  void operator()(int64_t d, const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (!first.ok()) return;
    first = s.with_context(fmt::format("device {}", world.first_device() + d));
    world.abort(failed_precondition("stopped because {}", first.message()));
  }
};

Status run_in_world(World& world, const std::function<Status(int64_t)>& fn, DeviceThreads::State* kept) {
  FirstFailure failure{world};
  Status result = run_threads(world.local_devices(), fn, std::ref(failure), kept);
  return failure.first.ok() ? result : failure.first;
}

}  // namespace

Status run_on_devices(int64_t num_devices, const std::function<Status(int64_t)>& fn) {
  return run_threads(num_devices, fn, [](int64_t, const Status&) {}, nullptr);
}

Status run_on_devices(World& world, const std::function<Status(int64_t)>& fn) {
  return run_in_world(world, fn, nullptr);
}

DeviceThreads::DeviceThreads(int64_t num_devices) : num_devices_(num_devices), state_(std::make_unique<State>()) {
  if (num_devices_ <= 1) return;
  state_->workers.reserve(static_cast<size_t>(num_devices_));
  for (int64_t d = 0; d < num_devices_; ++d) {
    state_->workers.emplace_back([s = state_.get(), d] {
      tls_worker_of = s;
      s->serve(d);
    });
  }
}

DeviceThreads::~DeviceThreads() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->work.notify_all();
  for (auto& t : state_->workers) t.join();
}

Status DeviceThreads::run(const std::function<Status(int64_t)>& fn) {
  return run_threads(num_devices_, fn, [](int64_t, const Status&) {}, state_.get());
}

Status DeviceThreads::run(World& world, const std::function<Status(int64_t)>& fn) {
  KILN_CHECK(world.local_devices() == num_devices_)
      << "device threads for " << num_devices_ << " devices, world has " << world.local_devices();
  return run_in_world(world, fn, state_.get());
}

}  // namespace kiln::runtime
