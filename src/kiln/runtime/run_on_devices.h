// One thread per virtual device, each with its share of the cores.
#pragma once

#include <functional>
#include <memory>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime {

// The OpenMP (and so oneDNN) thread count each of `num_devices` device threads gets:
// omp_get_max_threads() of the caller (OMP_NUM_THREADS, else the cores) / num_devices, at
// least 1.
int threads_per_device(int64_t num_devices);

// Runs fn(device_id) for device_id in [0, num_devices) on one thread each (the calling thread
// when num_devices == 1), with omp_set_num_threads(threads_per_device) set on that thread,
// joins them and returns the first error (by device id).
Status run_on_devices(int64_t num_devices, const std::function<Status(int64_t)>& fn);

// The same over the local devices of `world`, passing the local index: as soon as one device
// fails, world.abort() fails the collectives the others wait on, so they return instead of
// waiting for the timeout. Returns the first failure in time (the cause, not the echoes).
Status run_on_devices(World& world, const std::function<Status(int64_t)>& fn);

// Device threads kept from one call to the next: run() is run_on_devices on threads started
// once, in the constructor, and joined in the destructor. What a device thread keeps (its
// OpenMP team, its oneDNN stream, its kernels' scratch and malloc cache, the collectives it
// has in flight) then lasts as long as this object instead of one step; a step runner owns
// one for its local devices. Calls from several threads take turns; a call from one of these
// threads (fn calling run again) runs on fresh threads, as run_on_devices does. With one
// device, fn runs on the calling thread and no thread is started.
class DeviceThreads {
 public:
  explicit DeviceThreads(int64_t num_devices);
  ~DeviceThreads();
  DeviceThreads(const DeviceThreads&) = delete;
  DeviceThreads& operator=(const DeviceThreads&) = delete;

  Status run(const std::function<Status(int64_t)>& fn);
  Status run(World& world, const std::function<Status(int64_t)>& fn);

  struct State;  // the workers' shared state (run_on_devices.cc)

 private:
  int64_t num_devices_;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::runtime
