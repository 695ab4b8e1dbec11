#include "kiln/train/run_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

namespace kiln::train {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The holder's line, as it wrote it ("" if unreadable).
std::string holder_of(int fd) {
  char buf[512] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

int64_t launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::strtoll(v, nullptr, 10);
  }
  return 0;
}

Result<std::unique_ptr<RunLock>> RunLock::acquire(const std::string& run_dir, int64_t rank) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return io_error("cannot create directory {}: {}", run_dir, ec.message());
  const std::string path = (std::filesystem::path(run_dir) / fmt::format(".lock.rank{}", rank)).string();
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open the run lock {}: {}", path, std::strerror(errno));
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (fcntl(fd, F_SETLK, &lock) != 0) {
    const int err = errno;
    const std::string holder = holder_of(fd);
    close(fd);
    if (err == EACCES || err == EAGAIN) {
      return failed_precondition("run directory {} is in use: another kiln train holds {} ({}); stop it, or choose "
                                 "another run_name or base_output_directory",
                                 run_dir, path, holder.empty() ? "its holder wrote nothing yet" : holder);
    }
    return io_error("cannot lock {}: {}", path, std::strerror(err));
  }
  const std::string line =
      fmt::format("pid {} on host {}, rank {}, since {}\n", getpid(), host_name(), rank, utc_now());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    // The lock holds without the line; only a refused second trainer's message is poorer.
  }
  return std::unique_ptr<RunLock>(new RunLock(path, fd));
}

RunLock::~RunLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock; the file stays (the next holder rewrites it)
}

}  // namespace kiln::train
