#include "kiln/runtime/world.h"

#include <cstdlib>

#include "kiln/config/config.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/mpi_world.h"

namespace kiln::runtime {

Result<int64_t> launcher_num_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    long long n = std::strtoll(v, &end, 10);
    if (*end != '\0' || n < 1) {
      return invalid_argument("{}={}: expected a positive number of ranks", name, v);
    }
    return static_cast<int64_t>(n);
  }
  return int64_t{1};
}

Result<std::unique_ptr<World>> make_world(int64_t mesh_devices, int64_t local_devices,
                                          Options options) {
  KILN_ASSIGN_OR_RETURN(int64_t ranks, launcher_num_ranks());
  if (local_devices < 1) return invalid_argument("local_devices={}: expected at least 1", local_devices);
  if (mesh_devices != ranks * local_devices) {
    return invalid_argument(
        "the mesh has {} devices but this run has {} rank{} × local_devices={} = {}; set the "
        "ici_*/dcn_* sizes, local_devices or mpirun -np to agree",
        mesh_devices, ranks, ranks == 1 ? "" : "s", local_devices, ranks * local_devices);
  }
  KILN_ASSIGN_OR_RETURN(double timeout, resolve_timeout_s(options));
  options.timeout_s = timeout;
  if (ranks == 1) return std::unique_ptr<World>(std::make_unique<LocalWorld>(local_devices, options));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<MpiWorld> w, MpiWorld::create(local_devices, options));
  if (w->num_ranks() != ranks) {
    return failed_precondition("MPI reports {} ranks but the launcher said {}", w->num_ranks(), ranks);
  }
  return std::unique_ptr<World>(std::move(w));
}

Result<std::unique_ptr<World>> make_world(const config::Config& config, Options options) {
  const config::Derived& d = config.derived();
  return make_world(d.mesh.num_devices(), d.local_devices, options);
}

}  // namespace kiln::runtime
