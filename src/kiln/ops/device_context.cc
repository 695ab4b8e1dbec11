#include "kiln/ops/device_context.h"

#include <cstdio>
#include <cstdlib>

#include "kiln/base/check.h"
#include "kiln/base/strings.h"
#include "kiln/ops/collectives.h"

namespace kiln::ops {
namespace {

const DeviceContext& single_device() {
  static const DeviceContext context;
  return context;
}

thread_local const DeviceContext* tls_context = nullptr;

}  // namespace

const DeviceContext& current_device() { return tls_context ? *tls_context : single_device(); }

namespace {

CollectiveGroup group_on(const DeviceContext& ctx, const ir::Instr& instr) {
  std::vector<std::string> axes;
  for (const std::string& a : split(instr.attrs().get_string("mesh_axes"), ',')) {
    if (!trim(a).empty()) axes.emplace_back(trim(a));
  }
  return CollectiveGroup{ctx.mesh.group(ctx.device, axes), ctx.mesh.shard_index(ctx.device, axes)};
}

}  // namespace

CollectiveGroup collective_group(const ir::Instr& instr) {
  const DeviceContext& ctx = current_device();
  CollectiveGroup g = group_on(ctx, instr);
  KILN_CHECK_EQ(static_cast<int64_t>(g.members.size()), instr.attrs().get_int("group_size"))
      << instr.to_string() << ": group_size does not match the mesh " << ctx.mesh.to_string();
  if (g.members.size() > 1) KILN_CHECK(ctx.collectives != nullptr) << instr.to_string() << ": no collectives installed";
  return g;
}

Status check_collective_group(const ir::Instr& instr) {
  if (!instr.attrs().has("mesh_axes") || !instr.attrs().has("group_size")) return ok_status();
  const DeviceContext& ctx = current_device();
  const int64_t members = static_cast<int64_t>(group_on(ctx, instr).members.size());
  if (members != instr.attrs().get_int("group_size")) {
    return invalid_argument("%{}: group_size={} over mesh_axes={}, but this run's mesh ({}) makes a group of {}",
                            instr.id(), instr.attrs().get_int("group_size"), instr.attrs().get_string("mesh_axes"),
                            ctx.mesh.to_string(), members);
  }
  if (members > 1 && ctx.collectives == nullptr) {
    return invalid_argument("%{}: a collective over {} devices, but this run has no collectives", instr.id(), members);
  }
  return ok_status();
}

void wait_for(std::unique_ptr<Pending> pending, const ir::Instr& instr) {
  Status s = pending->wait();
  if (s.ok()) return;
  // A timeout or a dead peer is the run's failure, not a broken invariant: one line naming
  // the collective and the devices, then the process ends (under MPI, mpirun ends the job).
  // Kernels have no error channel, and the other ranks' waits fail the same way.
  std::fprintf(stderr, "kiln: error: %s (in %%%s)\n", s.message().c_str(), instr.id().c_str());
  std::fflush(stderr);
  std::_Exit(kCollectiveFailedExitCode);
}

ScopedDeviceContext::ScopedDeviceContext(const DeviceContext* context) : previous_(tls_context) {
  tls_context = context;
}

ScopedDeviceContext::~ScopedDeviceContext() { tls_context = previous_; }

}  // namespace kiln::ops
