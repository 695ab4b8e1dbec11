#include "kiln/runtime/run_on_devices.h"

#include <omp.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime {

int threads_per_device(int64_t num_devices) {
  return std::max<int>(1, omp_get_max_threads() / static_cast<int>(std::max<int64_t>(1, num_devices)));
}

namespace {

Status run_threads(int64_t num_devices, const std::function<Status(int64_t)>& fn,
                   const std::function<void(int64_t, const Status&)>& on_error) {
  int threads = threads_per_device(num_devices);
  std::vector<Status> results(num_devices);
  auto body = [&](int64_t d) {
    omp_set_num_threads(threads);  // per thread: this device's OpenMP regions and oneDNN calls
    results[d] = fn(d);
    if (!results[d].ok()) on_error(d, results[d]);
  };
  if (num_devices == 1) {
    int saved = omp_get_max_threads();
    body(0);
    omp_set_num_threads(saved);
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

}  // namespace

Status run_on_devices(int64_t num_devices, const std::function<Status(int64_t)>& fn) {
  return run_threads(num_devices, fn, [](int64_t, const Status&) {});
}

Status run_on_devices(World& world, const std::function<Status(int64_t)>& fn) {
  std::mutex mu;
  Status first;
  Status result = run_threads(world.local_devices(), fn, [&](int64_t d, const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (!first.ok()) return;
    first = s.with_context(fmt::format("device {}", world.first_device() + d));
    world.abort(failed_precondition("stopped because {}", first.message()));
  });
  return first.ok() ? result : first;
}

}  // namespace kiln::runtime
