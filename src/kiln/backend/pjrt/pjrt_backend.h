// The PJRT backend: Kiln's compile pipeline (everything in front of the device: partitioned
// program, cleanups, remat), then the per-device program as StableHLO text
// (stablehlo/emitter.h), compiled and run by an XLA plugin through the PJRT C API
// (pjrt_client.h) in replica mode, one replica per device of the mesh. XLA fuses, schedules
// and assigns device memory itself, so Kiln's loop fusion and async pairs are left out.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/backend/pjrt/aot_target.h"
#include "kiln/base/status.h"

namespace kiln::backend::pjrt {

struct PjrtBackendOptions {
  std::string plugin = "cpu";  // pjrt_plugin: cpu | cuda | tpu | a path (plugin_path.h)
  int num_devices = 1;         // devices of the client (the CPU plugin makes that many)
  // Processes of the job (MPI ranks), one client each; above 1 the clients meet through a
  // key-value store served over MPI (kv_store.h), which must be running.
  int num_nodes = 1;
};

// The backend for `options`, made on first use (the plugin loaded, its client created) and
// kept for the process: one per plugin and device count. Errors: the plugin is missing (the
// message names the requirements file and command), too old, or has fewer devices.
Result<const Backend*> pjrt_backend(const PjrtBackendOptions& options);

// A backend that compiles ahead of time for `target` (compile_topology), whose hardware is not
// here: its executables report XLA's memory and census (CompileReport::xla) and refuse to run.
// The plugin is the one the target names (cuda, tpu), or `plugin_override` when that is a path.
// Errors: the plugin is not installed (the message names its requirements file) or too old.
Result<const Backend*> pjrt_aot_backend(const AotTarget& target, const std::string& plugin_override);

}  // namespace kiln::backend::pjrt
