#include "formats/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ndt::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  const std::string text = stream_.str();
  std::fprintf(stderr, "ndtrace: internal error: %s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace ndt::internal
