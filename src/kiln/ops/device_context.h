// The device an SPMD per-device program is running as, for the ops that depend on it:
// the collectives (all_gather, reduce_scatter, all_reduce, all_to_all) and shard_slice.
// Whoever runs a per-device program on a thread (the interpreter in a multi-device test,
// a virtual device of the runtime) installs one with ScopedDeviceContext; without one the
// thread is the only device of a one-device mesh, where every collective is the identity.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/instr.h"
#include "kiln/ops/collectives.h"

namespace kiln::ops {

struct DeviceContext {
  config::Mesh mesh;
  int64_t device = 0;
  Collectives* collectives = nullptr;  // required when the mesh has > 1 device
};

// This thread's device (a one-device default when none is installed).
const DeviceContext& current_device();

// The group a collective or shard_slice instruction runs over on this thread's device:
// the devices named by its `mesh_axes` attribute, in rank order, and this device's rank.
// Checks group_size against the mesh, and that collectives are installed when the group has
// other members (both are compiler invariants, not user input).
struct CollectiveGroup {
  std::vector<int64_t> members;
  int64_t rank = 0;
};
CollectiveGroup collective_group(const ir::Instr& instr);
// The same conditions as an error, for a program that came from a user's file (the
// interpreter checks each collective before running it).
Status check_collective_group(const ir::Instr& instr);
// Waits for a collective `instr` started; a timeout or a dead peer ends the process with one
// line on stderr and kCollectiveFailedExitCode (kernels have no error channel; the runtime
// has already failed the other devices' waits).
inline constexpr int kCollectiveFailedExitCode = 3;
void wait_for(std::unique_ptr<Pending> pending, const ir::Instr& instr);

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
