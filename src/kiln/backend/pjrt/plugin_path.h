// Where a PJRT plugin's shared object lives. Plugins are PyPI wheels installed into the
// project's venv (python/requirements-pjrt.txt), so a short name is looked up there:
//   cpu   xla-cpu-pjrt's xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so    (installed by make)
//   cuda  jax-cuda13-pjrt's jax_plugins/<pkg>/xla_cuda_plugin.so     (opt-in)
//   tpu   libtpu's libtpu/libtpu.so                                  (opt-in)
// and anything containing a '/' or ending in ".so" is taken as a path.
#pragma once

#include <string>
#include <string_view>

#include "kiln/base/status.h"

namespace kiln::backend::pjrt {

// The venv plugins are looked up in: $KILN_VENV if set, else the checkout's .venv (fixed when
// Kiln is built).
std::string plugin_venv();

// The shared object for `name` (above). A missing plugin is a one-line error naming what was
// looked for and the command that installs it; a path with a '/' must exist.
Result<std::string> resolve_plugin(std::string_view name);

}  // namespace kiln::backend::pjrt
