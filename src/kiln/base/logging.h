// Levelled logging to stderr. Verbosity comes from --v=N (set_verbosity) or KILN_VLOG=N.
//   KILN_LOG(INFO) << "compiled " << n << " kernels";
//   KILN_VLOG(2) << "fusion: " << reason;
#pragma once

#include <sstream>

namespace kiln {

enum class LogSeverity { INFO, WARNING, ERROR };

int verbosity();
void set_verbosity(int level);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace kiln

#define KILN_LOG(severity) \
  ::kiln::internal::LogMessage(::kiln::LogSeverity::severity, __FILE__, __LINE__).stream()
#define KILN_VLOG(level)                           \
  if (::kiln::verbosity() < (level)) {             \
  } else                                           \
    ::kiln::internal::LogMessage(::kiln::LogSeverity::INFO, __FILE__, __LINE__).stream()
