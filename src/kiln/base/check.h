// KILN_CHECK: a broken invariant inside Kiln (never bad user input). Prints the message with
// file and line and aborts, so a debugger or core dump shows where.
//   KILN_CHECK(x.rank() == 2) << "while lowering " << instr_text;
#pragma once

#include <sstream>

namespace kiln::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `KILN_CHECK(c) << ...` be an expression of type void on both branches.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kiln::internal

#define KILN_CHECK(condition)                  \
  (condition) ? (void)0                        \
              : ::kiln::internal::Voidify() &  \
                    ::kiln::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define KILN_CHECK_EQ(a, b) KILN_CHECK((a) == (b)) << "(" << (a) << " vs " << (b) << ") "
#define KILN_CHECK_NE(a, b) KILN_CHECK((a) != (b)) << "(" << (a) << " vs " << (b) << ") "
#define KILN_CHECK_LT(a, b) KILN_CHECK((a) < (b)) << "(" << (a) << " vs " << (b) << ") "
#define KILN_CHECK_LE(a, b) KILN_CHECK((a) <= (b)) << "(" << (a) << " vs " << (b) << ") "
#define KILN_CHECK_GE(a, b) KILN_CHECK((a) >= (b)) << "(" << (a) << " vs " << (b) << ") "
#define KILN_CHECK_OK(expr)                                            \
  do {                                                                 \
    auto kiln_check_status_ = ::kiln::internal::as_status(expr);       \
    KILN_CHECK(kiln_check_status_.ok()) << kiln_check_status_.to_string(); \
  } while (0)
#define KILN_UNREACHABLE() KILN_CHECK(false) << "unreachable "
