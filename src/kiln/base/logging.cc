#include "kiln/base/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln {
namespace {

int initial_verbosity() {
  const char* env = std::getenv("KILN_VLOG");
  return env ? std::atoi(env) : 0;
}

std::atomic<int>& verbosity_flag() {
  static std::atomic<int> level{initial_verbosity()};
  return level;
}

}  // namespace

int verbosity() { return verbosity_flag().load(std::memory_order_relaxed); }
void set_verbosity(int level) { verbosity_flag().store(level); }

namespace internal {

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  const char* base = std::strrchr(file, '/');
  const char* tag = severity == LogSeverity::INFO ? "I" : severity == LogSeverity::WARNING ? "W" : "E";
  stream_ << tag << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  (void)severity_;
}

}  // namespace internal
}  // namespace kiln
