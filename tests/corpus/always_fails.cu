// always_fails: for checking that `ndtrace check` never calls a failing program deterministic
// with exit 0. Default: two CUDA calls (cudaMalloc, cudaMemset), then exit status 1, every run.
// --refused-launch: a launch the device refuses (2048 threads per block, more than the 1024 any
// device allows: cudaErrorInvalidConfiguration or cudaErrorInvalidValue), reported and ignored,
// then the program carries on, prints its checksum and exits 0. --plant is accepted and changes
// nothing: the program is equally broken either way.
#include "corpus_common.h"
#include "corpus_kernels.cuh"

int main(int argc, char** argv) {
  float* buffer = nullptr;
  CORPUS_CHECK(cudaMalloc(&buffer, 1024 * sizeof(float)));
  CORPUS_CHECK(cudaMemset(buffer, 0, 1024 * sizeof(float)));
  if (!corpus::HasFlag(argc, argv, "--refused-launch")) {
    std::fprintf(stderr, "always_fails: giving up with exit status 1\n");
    return 1;
  }
  CorpusAxpby<<<1, 2048>>>(2.0f, buffer, 1.0f, buffer, 1024);
  const cudaError_t refused = cudaGetLastError();
  std::fprintf(stderr, "always_fails: the launch was refused: %s\n", cudaGetErrorName(refused));
  CorpusAxpby<<<8, 128>>>(2.0f, buffer, 1.0f, buffer, 1024);
  CORPUS_CHECK(cudaGetLastError());
  float host[1024];
  CORPUS_CHECK(cudaMemcpy(host, buffer, sizeof(host), cudaMemcpyDeviceToHost));
  ndt::programs::PrintChecksum(host, sizeof(host));
  cudaFree(buffer);
  return refused == cudaSuccess ? 1 : 0;
}
