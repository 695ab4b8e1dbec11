// One writer per run directory: a trainer holds RUN_DIR/.lock.rank<R> (a POSIX record lock,
// which NFS's lock manager also honours) for as long as it lives; the kernel drops the lock
// when the process ends, however it ends (kill -9 included), so a dead holder never blocks a
// restart. A second trainer on the same directory and rank -- a scheduler restarting a job
// whose old process still runs, two jobs given one run_name -- is refused with one line
// naming the holder (its pid, host and start time, which the holder writes into the file),
// before it writes anything.
//
// Record locks belong to the process: two trainers in one process (tests) do not exclude each
// other, and the first to go releases the other's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/base/status.h"

namespace kiln::train {

class RunLock {
 public:
  // Creates `run_dir` if needed and takes its lock for `rank`.
  static Result<std::unique_ptr<RunLock>> acquire(const std::string& run_dir, int64_t rank);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  RunLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// The launcher's rank of this process (OMPI_COMM_WORLD_RANK or PMI_RANK), 0 without one.
int64_t launcher_rank();

}  // namespace kiln::train
