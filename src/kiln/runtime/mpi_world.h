// MPI: one rank per process, `local_devices` virtual devices per rank, global device id =
// rank * local_devices + local index; the same Collectives interface as LocalWorld, with every
// transfer between two devices (also two devices of one rank) a nonblocking MPI message
// polled with MPI_Test until the deadline. Device threads call MPI themselves, so MPI must
// provide MPI_THREAD_MULTIPLE (Debian's OpenMPI does).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "kiln/runtime/collectives.h"

namespace kiln::runtime {

// Receive buffers for reductions that each device keeps between collectives (each as large as
// the largest reduction it served): memory outside the compiled plan, which the trainer's
// start-up check adds (train/memory_budget.h).
inline constexpr int kReductionScratchKept = 4;

class MpiWorld final : public World {
 public:
  // Initializes MPI with MPI_THREAD_MULTIPLE unless it is initialized already; one MpiWorld
  // per process (MPI cannot be initialized twice). Collective over all ranks: every rank
  // must call it with the same local_devices.
  static Result<std::unique_ptr<MpiWorld>> create(int64_t local_devices, Options options = {});
  // Finalizes MPI when create() initialized it.
  ~MpiWorld() override;

  int64_t rank() const override { return rank_; }
  int64_t num_ranks() const override { return num_ranks_; }
  int64_t local_devices() const override { return local_devices_; }
  Collectives& device(int64_t local) override;
  void abort(const Status& why) override;
  double timeout_s() const { return timeout_s_; }

  // For the top level of an application after a fatal error: prints
  // "kiln: error: rank R: <why>" on stderr and ends the whole MPI job (MPI_Abort), so that
  // mpirun stops the other ranks at once instead of leaving them to time out.
  [[noreturn]] void abort_job(const Status& why, int exit_code = 1);

  struct Impl;

 private:
  MpiWorld() = default;
  int64_t rank_ = 0, num_ranks_ = 1, local_devices_ = 1;
  double timeout_s_ = kDefaultCollectiveTimeoutS;
  bool finalize_ = false;
  std::unique_ptr<Impl> impl_;
  std::vector<std::unique_ptr<Collectives>> devices_;
};

}  // namespace kiln::runtime
