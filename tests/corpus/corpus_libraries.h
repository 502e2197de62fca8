// Error checks for the corpus programs that call cuBLAS and cuDNN (a failed call ends the
// program with status 2, as CORPUS_CHECK does for the runtime).
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>

namespace corpus {

inline void CheckDnn(cudnnStatus_t status, const char* what, int line) {
  if (status != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s (line %d) failed: %s\n", what, line, cudnnGetErrorString(status));
    std::exit(2);
  }
}
#define DNN_CHECK(call) ::corpus::CheckDnn((call), #call, __LINE__)

inline void CheckBlas(cublasStatus_t status, const char* what, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s (line %d) failed: status %d\n", what, line, static_cast<int>(status));
    std::exit(2);
  }
}
#define BLAS_CHECK(call) ::corpus::CheckBlas((call), #call, __LINE__)

}  // namespace corpus
