// Progress for asynchronous collectives between kernels. The runtime has no progress
// thread: a started collective moves only while its device is inside the runtime. A device
// computing between a start and its done would otherwise keep its peers waiting for it to
// read their buffers (virtual devices) or answer their messages (MPI) until its done; the
// executable calls this after every kernel, and it advances this thread's in-flight
// collectives without blocking (nothing when none is in flight).
// KILN_COLLECTIVE_PROGRESS=0 turns it off (for measuring what it buys).
#pragma once

namespace kiln::backend::cpu {

void progress_collectives();
// Whether this thread has ragged exchanges in flight (ragged_all_to_all_kernel.cc).
bool ragged_collectives_in_flight();

}  // namespace kiln::backend::cpu
