// A program with worker processes, like a PyTorch training script with DataLoader workers:
// the parent runs a loop of copies and kernels; it forks one host-only worker (which never
// touches CUDA) after initialising CUDA, and, with --cuda-child, one CUDA worker before, which
// runs the same loop in its own process. Deterministic (exact float arithmetic).
//
//   workers [--cuda-child] [--iterations N] [--crash | --then-exec PROGRAM]
//
// (default 8 iterations). Prints "checksum <hex>" of the parent's result; a worker reports
// through its exit status. Then --crash writes through a null pointer (SIGSEGV) and
// --then-exec replaces the process with PROGRAM (no arguments): how tracer tests end a
// process in the middle of its life.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_checksum.h"

__global__ void Step(float* data, int n, float add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = data[i] * 0.5f + add;
  }
}

namespace {

constexpr int kN = 1 << 12;

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "workers: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

std::vector<float> Loop(long iterations) {
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i % 97);
  float* device = nullptr;
  Check(cudaMalloc(&device, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(device, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "HtoD");
  for (long it = 0; it < iterations; ++it) {
    Step<<<8, 128>>>(device, kN, static_cast<float>(it % 16));
    Check(cudaGetLastError(), "launch");
  }
  Check(cudaMemcpy(host.data(), device, kN * sizeof(float), cudaMemcpyDeviceToHost), "DtoH");
  Check(cudaFree(device), "cudaFree");
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  bool cuda_child = false;
  bool crash = false;
  const char* then_exec = nullptr;
  long iterations = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cuda-child") == 0) {
      cuda_child = true;
    } else if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--crash") == 0) {
      crash = true;
    } else if (std::strcmp(argv[i], "--then-exec") == 0 && i + 1 < argc) {
      then_exec = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: workers [--cuda-child] [--iterations N] [--crash | --then-exec P]\n");
      return 2;
    }
  }
  // CUDA cannot be used in a child forked after the parent initialised it: fork that one first.
  pid_t cuda_worker = -1;
  if (cuda_child) {
    cuda_worker = fork();
    if (cuda_worker == 0) {
      const std::vector<float> result = Loop(iterations);
      std::_Exit(result[1] == result[1] ? 0 : 1);
    }
  }
  const std::vector<float> result = Loop(iterations);
  // A host-only worker, forked after CUDA is initialised: it must leave no trace.
  const pid_t host_worker = fork();
  if (host_worker == 0) {
    long sum = 0;
    for (int i = 0; i < 1000; ++i) sum += i;
    std::_Exit(sum == 499500 ? 0 : 1);
  }
  int failures = 0;
  for (pid_t worker : {cuda_worker, host_worker}) {
    if (worker <= 0) continue;
    int status = 0;
    if (waitpid(worker, &status, 0) != worker || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failures;
    }
  }
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  std::fflush(stdout);
  if (crash) *static_cast<volatile int*>(nullptr) = 1;
  if (then_exec != nullptr) {
    char* const exec_argv[] = {const_cast<char*>(then_exec), nullptr};
    execv(then_exec, exec_argv);
    std::perror("workers: execv");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
