// allreduce [--ranks N] [iterations]: N NCCL ranks in one process (ncclCommInitAll, one thread
// driving every rank through ncclGroupStart/End), each all-reducing kCount floats of mixed
// magnitude (sum) on its own stream; prints the checksum of rank 0's results.
//
// Ranks default to the number of devices (on a GPU machine NCCL refuses two ranks on one GPU;
// the stand-in device allows them). Each iteration all-reduces the previous results again.
// Float addition is not associative, so the bits depend on NCCL's reduction order: fixed with
// NCCL_ALGO=Ring on the stand-in, racing otherwise.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_checksum.h"

namespace {

constexpr size_t kCount = 1 << 16;

bool Ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "allreduce: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

bool Ok(ncclResult_t status, const char* what) {
  if (status == ncclSuccess) return true;
  std::fprintf(stderr, "allreduce: %s: %s\n", what, ncclGetErrorString(status));
  return false;
}

// Rank r's value i: mixed signs and magnitudes from 1e-3 to 1e3, so that the order of the sum
// changes its rounding.
float Value(size_t i, int r) {
  const auto mixed = static_cast<long long>((i * 2654435761ull + static_cast<size_t>(r) * 97) %
                                            2001) -
                     1000;
  return static_cast<float>(mixed) *
         std::pow(10.0f, static_cast<float>(static_cast<int>((i + static_cast<size_t>(r)) % 7) - 3));
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0;
  int iterations = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
      if (ranks < 1) ranks = -1;
    } else {
      iterations = std::atoi(argv[i]);
      if (iterations < 1) ranks = -1;
    }
  }
  if (ranks < 0) {
    std::fprintf(stderr, "usage: allreduce [--ranks N] [iterations]\n");
    return 2;
  }
  int devices = 0;
  if (!Ok(cudaGetDeviceCount(&devices), "cudaGetDeviceCount") || devices < 1) return 1;
  if (ranks == 0) ranks = devices;

  const auto n = static_cast<size_t>(ranks);
  std::vector<int> devlist(n);
  std::vector<float*> send(n), recv(n);
  std::vector<cudaStream_t> streams(n);
  std::vector<float> host(kCount);
  for (size_t r = 0; r < n; ++r) {
    devlist[r] = static_cast<int>(r) % devices;
    for (size_t i = 0; i < kCount; ++i) host[i] = Value(i, static_cast<int>(r));
    if (!Ok(cudaSetDevice(devlist[r]), "cudaSetDevice") ||
        !Ok(cudaMalloc(&send[r], kCount * sizeof(float)), "cudaMalloc") ||
        !Ok(cudaMalloc(&recv[r], kCount * sizeof(float)), "cudaMalloc") ||
        !Ok(cudaStreamCreate(&streams[r]), "cudaStreamCreate") ||
        !Ok(cudaMemcpy(send[r], host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy")) {
      return 1;
    }
  }
  std::vector<ncclComm_t> comms(n);
  if (!Ok(ncclCommInitAll(comms.data(), ranks, devlist.data()), "ncclCommInitAll")) return 1;

  std::vector<float> results;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    if (!Ok(ncclGroupStart(), "ncclGroupStart")) return 1;
    for (size_t r = 0; r < n; ++r) {
      if (!Ok(ncclAllReduce(send[r], recv[r], kCount, ncclFloat, ncclSum, comms[r], streams[r]),
              "ncclAllReduce")) {
        return 1;
      }
    }
    if (!Ok(ncclGroupEnd(), "ncclGroupEnd")) return 1;
    std::vector<float> first;
    for (size_t r = 0; r < n; ++r) {
      if (!Ok(cudaSetDevice(devlist[r]), "cudaSetDevice") ||
          !Ok(cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize") ||
          !Ok(cudaMemcpy(host.data(), recv[r], kCount * sizeof(float), cudaMemcpyDeviceToHost),
              "cudaMemcpy")) {
        return 1;
      }
      if (r == 0) {
        first = host;
      } else if (std::memcmp(first.data(), host.data(), kCount * sizeof(float)) != 0) {
        std::fprintf(stderr, "allreduce: rank %zu's result differs from rank 0's\n", r);
        return 1;
      }
      // The next iteration reduces these results again.
      if (!Ok(cudaMemcpy(send[r], recv[r], kCount * sizeof(float), cudaMemcpyDeviceToDevice),
              "cudaMemcpy")) {
        return 1;
      }
    }
    results.insert(results.end(), first.begin(), first.end());
  }
  ndt::programs::PrintChecksum(results.data(), results.size() * sizeof(float));

  for (size_t r = 0; r < n; ++r) {
    if (!Ok(ncclCommDestroy(comms[r]), "ncclCommDestroy") ||
        !Ok(cudaStreamDestroy(streams[r]), "cudaStreamDestroy") ||
        !Ok(cudaFree(send[r]), "cudaFree") || !Ok(cudaFree(recv[r]), "cudaFree")) {
      return 1;
    }
  }
  return 0;
}
