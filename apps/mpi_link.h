// The link between MPI ranks for `kiln plan --calibrate`: the calibrating process launches a
// small MPI job of itself (`mpiexec -np 2 kiln plan --measure-mpi-link FILE`) whose ranks
// all-gather between them; rank 0 writes the fitted link to FILE.
#pragma once

#include <string>

#include "kiln/base/status.h"
#include "kiln/plan/target.h"

namespace kiln::app {

// In the job: measures the link between this launch's ranks (one device each) and, on rank 0,
// writes it to `file` as JSON. Every rank must call it.
Status measure_mpi_link(const std::string& file);

// From the calibrating process: launches the job and reads its result. The launcher is
// KILN_MPIEXEC (default `mpiexec --oversubscribe`, with `--allow-run-as-root` as root);
// KILN_MPIEXEC=none skips the measurement (an error saying so).
Result<plan::Link> run_mpi_link_job();

}  // namespace kiln::app
