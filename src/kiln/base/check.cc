#include "kiln/base/check.h"

#include <cstdio>
#include <cstdlib>

namespace kiln::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << "Check failed at " << file << ":" << line << ": " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kiln::internal
