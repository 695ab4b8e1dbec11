// Run under `mpirun -np 2` with 2 virtual devices per rank; rank 1 "dies" before the first
// collective. Mode "leave": rank 1 finalizes MPI and exits without taking part; rank 0 must
// report the timeout naming device 2 and end the job. Mode "kill": rank 1 is killed by
// SIGKILL; the job must end (mpirun stops rank 0) instead of hanging.
//   mpirun -np 2 mpi_dead_rank leave|kill TIMEOUT_S
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/runtime/mpi_world.h"
#include "kiln/runtime/run_on_devices.h"

using namespace kiln;
using namespace kiln::runtime;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpi_dead_rank leave|kill TIMEOUT_S\n");
    return 2;
  }
  std::string mode = argv[1];
  auto world = MpiWorld::create(2, {.timeout_s = std::atof(argv[2])});
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().to_string().c_str());
    return 1;
  }
  MpiWorld& w = **world;
  if (w.rank() == 1) {
    if (mode == "kill") std::raise(SIGKILL);
    return 0;  // ~MpiWorld finalizes MPI: the process is gone for the collectives
  }
  Status s = run_on_devices(w, [&](int64_t local) {
    std::vector<float> in(16, 1.0f), out(64);
    return w.device(local).all_gather({0, 1, 2, 3}, in.data(), 64, out.data())->wait();
  });
  if (!s.ok()) w.abort_job(s);  // prints the error and ends the job for mpirun
  std::fprintf(stderr, "rank 0: the collective unexpectedly completed\n");
  return 1;
}
