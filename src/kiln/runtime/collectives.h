// What the runtime adds to the collective interface the op registry owns
// (ops/collectives.h): the timeout every wait uses, and the World, the set of devices one
// process drives. LocalWorld and MpiWorld implement ops::Collectives per device.
#pragma once

#include <cstdint>

#include "kiln/base/status.h"
#include "kiln/ops/collectives.h"

namespace kiln::runtime {

// The interface's names, which the runtime implements.
using ops::Collectives;
using ops::Group;
using ops::Pending;
using ops::ReduceDType;
using ops::group_to_string;
using ops::reduce_dtype_name;
using ops::reduce_dtype_size;

struct Options {
  // Deadline of every wait, in seconds; <= 0 reads KILN_COLLECTIVE_TIMEOUT_S (default 600).
  double timeout_s = 0;
};
inline constexpr double kDefaultCollectiveTimeoutS = 600;
// The timeout a world built with `options` uses; a malformed KILN_COLLECTIVE_TIMEOUT_S is an
// error naming the variable.
Result<double> resolve_timeout_s(const Options& options);

// A set of devices this process drives: LocalWorld or MpiWorld. Devices are numbered
// globally rank * local_devices + local index.
class World {
 public:
  virtual ~World() = default;
  virtual int64_t rank() const = 0;       // this process's MPI rank (0 without MPI)
  virtual int64_t num_ranks() const = 0;  // processes in the run (1 without MPI)
  virtual int64_t local_devices() const = 0;
  int64_t num_devices() const { return num_ranks() * local_devices(); }
  int64_t first_device() const { return rank() * local_devices(); }
  // The collectives of local device `local` (0 <= local < local_devices()).
  virtual Collectives& device(int64_t local) = 0;
  // Fails every local wait that is in flight or comes later with `why`, so no device of this
  // process hangs after another one failed. (Other ranks learn of it from their timeouts, or
  // sooner when the application ends the job: MpiWorld::abort_job.)
  virtual void abort(const Status& why) = 0;
};

}  // namespace kiln::runtime
