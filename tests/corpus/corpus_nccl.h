// What the corpus programs that drive NCCL share: its error check.
#pragma once

#include <nccl.h>

#include <cstdio>
#include <cstdlib>

namespace corpus {

inline void CheckNccl(ncclResult_t status, const char* what, int line) {
  if (status != ncclSuccess) {
    std::fprintf(stderr, "%s (line %d) failed: %s\n", what, line, ncclGetErrorString(status));
    std::exit(2);
  }
}

#define NCCL_CHECK(call) ::corpus::CheckNccl((call), #call, __LINE__)

}  // namespace corpus
