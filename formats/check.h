// NDT_CHECK: the channel for bugs. A failed check prints file, line, the condition and any
// context streamed into it, then aborts. It stays on in release builds. Never use it on
// input from outside (traces, files, the traced program): that is what Status is for, and
// the preload library must never abort its host (tracer/README.md).
#pragma once

#include <sstream>

namespace ndt::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace ndt::internal

#define NDT_CHECK(cond) \
  if (cond) {           \
  } else                \
    ::ndt::internal::CheckFailure(__FILE__, __LINE__, #cond)
