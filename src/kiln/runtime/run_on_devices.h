// One thread per virtual device, each with its share of the cores.
#pragma once

#include <functional>

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

}  // namespace kiln::runtime
