// Before any work, each process compares what its devices need (the compiled step's buffer
// assignment: state, activations, temporaries, kernel scratch, plus what the plan does not
// hold: the devices' thread stacks) with the memory it may use (the cgroup limit, the
// address-space and data-size limits, the available memory), and refuses with one line
// naming the need, the limit, and the smallest fsdp degree or remat policy that would fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"

namespace kiln::train {

// The most memory this process may still allocate, and which limit says so.
struct MemoryLimit {
  int64_t bytes = -1;  // -1: unknown (no limit could be read)
  std::string what;    // "data-size limit (RLIMIT_DATA) 1.00 GiB, 0.05 GiB in use"
};
MemoryLimit process_memory_limit();
// The process's resident set now (VmRSS), 0 where unknown.
int64_t current_resident_bytes();

// One device's need, from the compiled plan.
struct DeviceNeed {
  int64_t state_bytes = 0;   // parameters, Adam moments, weight copies (this device's shards)
  int64_t other_bytes = 0;   // the rest of the planned peak: activations, temporaries, batch, scratch
  int64_t thread_bytes = 0;  // stacks of the device's worker threads (not in the plan)
  int64_t runtime_bytes = 0; // the runtime's collective buffers (MPI reductions; not in the plan)
  int64_t total() const { return state_bytes + other_bytes + thread_bytes + runtime_bytes; }
};
// state_bytes: the state arguments' local bytes; the plan's peak gives the rest.
DeviceNeed device_need(const backend::CompileReport& plan, int64_t state_bytes, int64_t threads_per_device);

struct MemoryCheckInput {
  DeviceNeed per_device;
  int64_t local_devices = 1;
  int64_t global_state_bytes = 0;  // the whole model's state (for the fsdp suggestion)
  int64_t fsdp = 1;                // ici_fsdp_parallelism × dcn_fsdp_parallelism now
  std::string remat_policy;        // now
  int64_t saved_activation_bytes = 0;  // of other_bytes, what remat_policy=full would mostly drop
};
// The check's margin over the plan: planned and measured peaks agree within 10%.
inline constexpr double kMemoryHeadroom = 1.1;

// The memory one of `local_devices` may plan for: what this process may use
// (process_memory_limit), split over its local devices, less the headroom the start-up check
// keeps; 0 when unknown. backend::CompileOptions::device_memory_bytes.
int64_t device_memory_budget(int64_t local_devices);
// failed_precondition with the one line when the need, with the headroom, exceeds `limit`
// (a limit of -1 passes).
Status check_memory(const MemoryCheckInput& in, const MemoryLimit& limit);

}  // namespace kiln::train
