// Picks the world a run needs: MPI when launched by mpirun with more than one rank, else
// virtual devices in this process.
#pragma once

#include <memory>

#include "kiln/runtime/collectives.h"

namespace kiln::config {
class Config;
}

namespace kiln::runtime {

// MPI processes in this run as the launcher tells them (OMPI_COMM_WORLD_SIZE, set by
// OpenMPI's mpirun; PMI_SIZE, set by Slurm's srun --mpi=pmi2/pmix); 1 when neither is set.
// Pass it to config::LoadOptions::num_ranks so the mesh counts every rank's devices.
Result<int64_t> launcher_num_ranks();

// An MpiWorld when launcher_num_ranks() > 1, else a LocalWorld of local_devices. Errors (one
// line): mesh_devices != ranks × local_devices, a malformed KILN_COLLECTIVE_TIMEOUT_S, or MPI
// reporting a different number of ranks than the launcher.
Result<std::unique_ptr<World>> make_world(int64_t mesh_devices, int64_t local_devices,
                                          Options options = {});
// The same from a loaded config: its mesh's device count and local_devices (after -1).
Result<std::unique_ptr<World>> make_world(const config::Config& config, Options options = {});

}  // namespace kiln::runtime
