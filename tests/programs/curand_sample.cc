// curand_sample [--unseeded] [--dynamic] [iterations]: draws uniform and normal floats with a
// cuRAND Philox4x32-10 generator on its own stream, copies them to the host and prints the
// checksum of everything drawn.
//
// --unseeded seeds the generator from the clock and the pid, like a program that forgot to
// seed: two runs give different numbers. --dynamic asks for CURAND_ORDERING_PSEUDO_DYNAMIC, whose
// output order depends on the device. Each iteration makes one curandGenerateUniform and one
// curandGenerateNormal call of kCount values (default 1 iteration).
#include <cuda_runtime.h>
#include <curand.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_checksum.h"

namespace {

constexpr size_t kCount = 4096;
constexpr unsigned long long kSeed = 1234;

bool Ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "curand_sample: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

bool Ok(curandStatus_t status, const char* what) {
  if (status == CURAND_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "curand_sample: %s: curandStatus %d\n", what, static_cast<int>(status));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool unseeded = false;
  bool dynamic = false;
  int iterations = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--unseeded") == 0) {
      unseeded = true;
    } else if (std::strcmp(argv[i], "--dynamic") == 0) {
      dynamic = true;
    } else {
      iterations = std::atoi(argv[i]);
      if (iterations < 1) {
        std::fprintf(stderr, "usage: curand_sample [--unseeded] [--dynamic] [iterations]\n");
        return 2;
      }
    }
  }

  float* uniform = nullptr;
  float* normal = nullptr;
  cudaStream_t stream = nullptr;
  if (!Ok(cudaMalloc(&uniform, kCount * sizeof(float)), "cudaMalloc") ||
      !Ok(cudaMalloc(&normal, kCount * sizeof(float)), "cudaMalloc") ||
      !Ok(cudaStreamCreate(&stream), "cudaStreamCreate")) {
    return 1;
  }
  curandGenerator_t generator = nullptr;
  unsigned long long seed = kSeed;
  if (unseeded) {
    seed = static_cast<unsigned long long>(
               std::chrono::system_clock::now().time_since_epoch().count()) ^
           (static_cast<unsigned long long>(getpid()) << 32);
  }
  if (!Ok(curandCreateGenerator(&generator, CURAND_RNG_PSEUDO_PHILOX4_32_10),
          "curandCreateGenerator") ||
      !Ok(curandSetStream(generator, stream), "curandSetStream") ||
      !Ok(curandSetPseudoRandomGeneratorSeed(generator, seed),
          "curandSetPseudoRandomGeneratorSeed")) {
    return 1;
  }
  if (dynamic && !Ok(curandSetGeneratorOrdering(generator, CURAND_ORDERING_PSEUDO_DYNAMIC),
                     "curandSetGeneratorOrdering")) {
    return 1;
  }

  std::vector<float> drawn;
  std::vector<float> host(kCount);
  for (int iteration = 0; iteration < iterations; ++iteration) {
    if (!Ok(curandGenerateUniform(generator, uniform, kCount), "curandGenerateUniform")) return 1;
    if (!Ok(cudaMemcpyAsync(host.data(), uniform, kCount * sizeof(float), cudaMemcpyDeviceToHost,
                            stream),
            "cudaMemcpyAsync") ||
        !Ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) {
      return 1;
    }
    for (float value : host) {
      if (!(value > 0.0f && value <= 1.0f)) {
        std::fprintf(stderr, "curand_sample: uniform value %g outside (0, 1]\n", value);
        return 1;
      }
    }
    drawn.insert(drawn.end(), host.begin(), host.end());
    if (!Ok(curandGenerateNormal(generator, normal, kCount, 0.0f, 1.0f),
            "curandGenerateNormal")) {
      return 1;
    }
    if (!Ok(cudaMemcpyAsync(host.data(), normal, kCount * sizeof(float), cudaMemcpyDeviceToHost,
                            stream),
            "cudaMemcpyAsync") ||
        !Ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) {
      return 1;
    }
    for (float value : host) {
      if (!std::isfinite(value)) {
        std::fprintf(stderr, "curand_sample: normal value %g is not finite\n", value);
        return 1;
      }
    }
    drawn.insert(drawn.end(), host.begin(), host.end());
  }
  ndt::programs::PrintChecksum(drawn.data(), drawn.size() * sizeof(float));

  if (!Ok(curandDestroyGenerator(generator), "curandDestroyGenerator") ||
      !Ok(cudaStreamDestroy(stream), "cudaStreamDestroy") || !Ok(cudaFree(uniform), "cudaFree") ||
      !Ok(cudaFree(normal), "cudaFree")) {
    return 1;
  }
  return 0;
}
