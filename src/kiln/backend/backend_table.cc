// The name table of backends: what the `backend` key names, and what needs more than one
// backend (the interpreter fallback, the host's peaks). Its own library (kiln_backends), since
// it links every backend, and each backend links the interface.
#include <filesystem>

#include "kiln/backend/backend.h"
#include "kiln/backend/pjrt/pjrt_backend.h"

namespace kiln::backend {

Result<const Backend*> backend_named(std::string_view name) {
  if (name == cpu_backend().name()) return &cpu_backend();
  if (name == interpreter_backend().name()) return &interpreter_backend();
  if (name == "pjrt") return pjrt::pjrt_backend({});
  return invalid_argument("unknown backend '{}'; known backends: cpu, pjrt, interpreter", name);
}

Result<const Backend*> backend_for(const config::Config& config) {
  const std::string& name = config.get_string("backend");
  if (name != "pjrt") return backend_named(name);
  if (const std::optional<config::CompileTopology>& topology = config.derived().compile_topology) {
    KILN_ASSIGN_OR_RETURN(pjrt::AotTarget target,
                          pjrt::aot_target(*topology, (std::filesystem::path(config::find_configs_dir()) / "targets").string()));
    return pjrt::pjrt_aot_backend(target, config.get_string("pjrt_plugin"));
  }
  pjrt::PjrtBackendOptions options;
  options.plugin = config.get_string("pjrt_plugin");
  options.num_devices = static_cast<int>(config.derived().local_devices);
  options.num_nodes = static_cast<int>(config.derived().num_ranks);
  return pjrt::pjrt_backend(options);
}

namespace {

Result<std::vector<std::unique_ptr<Executable>>> compile_each(const Backend& backend, const ir::Module& module,
                                                              const CompileOptions& options, int64_t first_device,
                                                              int64_t local_devices) {
  std::vector<std::unique_ptr<Executable>> out;
  if (!backend.one_program_for_all_devices()) {
    for (int64_t d = 0; d < local_devices; ++d) {
      KILN_ASSIGN_OR_RETURN(std::unique_ptr<Executable> exe, backend.compile(module, options));
      out.push_back(std::move(exe));
    }
    return out;
  }
  // Across processes (backend=pjrt under mpirun) every process compiles the program for all the
  // mesh's devices and runs the replicas of its own: devices first_device and on.
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Executable> exe, backend.compile(module, options));
  if (exe->num_replicas() != local_devices) {
    return internal_error("backend={} compiled {} replicas to run here for devices {} to {} of {}", backend.name(),
                          exe->num_replicas(), first_device, first_device + local_devices - 1,
                          options.mesh.num_devices());
  }
  if (local_devices == 1) {
    out.push_back(std::move(exe));
    return out;
  }
  return replica_views(std::move(exe));
}

}  // namespace

Result<std::vector<std::unique_ptr<Executable>>> compile_for_devices(const Backend& backend, const ir::Module& module,
                                                                     const CompileOptions& options,
                                                                     int64_t first_device, int64_t local_devices,
                                                                     std::string* fallback_reason) {
  Result<std::vector<std::unique_ptr<Executable>>> made =
      compile_each(backend, module, options, first_device, local_devices);
  if (made.ok() || fallback_reason == nullptr || !backend.falls_back_to_interpreter()) return made;
  if (fallback_reason != nullptr) *fallback_reason = made.status().message();
  return compile_each(interpreter_backend(), module, options, first_device, local_devices);
}

Result<DevicePeaks> peaks_for(const Backend& backend, int threads_per_device) {
  Result<DevicePeaks> own = backend.measure_peaks(threads_per_device);
  if (own.ok() || own.status().code() != StatusCode::kUnimplemented) return own;
  // The interpreter runs on this host's CPU, and so does XLA's CPU plugin: MFU against the
  // host CPU's peaks, as before backends measured their own.
  return cpu_backend().measure_peaks(threads_per_device);
}

}  // namespace kiln::backend
