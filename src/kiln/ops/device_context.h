// The device an SPMD per-device program is running as, for the ops that depend on it:
// the collectives (all_gather, reduce_scatter, all_reduce, all_to_all) and shard_slice.
// Whoever runs a per-device program on a thread (the interpreter in a multi-device test,
// a virtual device of the runtime) installs one with ScopedDeviceContext; without one the
// thread is the only device of a one-device mesh, where every collective is the identity.
#pragma once

#include <cstdint>

#include "kiln/spmd/mesh.h"

namespace kiln::runtime {
class Collectives;
}

namespace kiln::ops {

struct DeviceContext {
  spmd::Mesh mesh;
  int64_t device = 0;
  runtime::Collectives* collectives = nullptr;  // required when the mesh has > 1 device
};

// This thread's device (a one-device default when none is installed).
const DeviceContext& current_device();

class ScopedDeviceContext {
 public:
  explicit ScopedDeviceContext(const DeviceContext* context);
  ~ScopedDeviceContext();
  ScopedDeviceContext(const ScopedDeviceContext&) = delete;
  ScopedDeviceContext& operator=(const ScopedDeviceContext&) = delete;

 private:
  const DeviceContext* previous_;
};

}  // namespace kiln::ops
