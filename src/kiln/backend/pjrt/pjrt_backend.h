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
#include "kiln/base/status.h"

namespace kiln::backend::pjrt {

struct PjrtBackendOptions {
  std::string plugin = "cpu";  // pjrt_plugin: cpu | cuda | tpu | a path (plugin_path.h)
  int num_devices = 1;         // devices of the client (the CPU plugin makes that many)
};

// The backend for `options`, made on first use (the plugin loaded, its client created) and
// kept for the process: one per plugin and device count. Errors: the plugin is missing (the
// message names the requirements file and command), too old, or has fewer devices.
Result<const Backend*> pjrt_backend(const PjrtBackendOptions& options);

}  // namespace kiln::backend::pjrt
