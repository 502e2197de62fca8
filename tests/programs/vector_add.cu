// Deterministic: c = a + b on two streams, each half copied in, added and copied out in stream
// order, timed with events. Float addition of the same two numbers is exact on every IEEE
// device, so the checksum is the same on the stand-in and on a GPU, run after run.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_checksum.h"

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    c[i] = a[i] + b[i];
  }
}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "vector_add: %s: %s (%s)\n", what, cudaGetErrorString(error),
               cudaGetErrorName(error));
  std::exit(1);
}

}  // namespace

int main() {
  constexpr int kN = 1 << 16;
  constexpr int kStreams = 2;
  constexpr int kChunk = kN / kStreams;
  constexpr size_t kChunkBytes = kChunk * sizeof(float);
  std::vector<float> a(kN), b(kN), c(kN);
  for (int i = 0; i < kN; ++i) {
    a[i] = static_cast<float>(i) * 0.25f;
    b[i] = 1.0f / static_cast<float>(i + 1);
  }

  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::fprintf(stderr, "vector_add: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor,
               prop.multiProcessorCount);

  float *da, *db, *dc;
  Check(cudaMalloc(&da, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&db, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&dc, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMemset(dc, 0, kN * sizeof(float)), "cudaMemset");

  cudaStream_t streams[kStreams];
  cudaEvent_t started[kStreams], finished[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    Check(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking), "cudaStreamCreate");
    Check(cudaEventCreate(&started[s]), "cudaEventCreate");
    Check(cudaEventCreate(&finished[s]), "cudaEventCreate");
  }
  for (int s = 0; s < kStreams; ++s) {
    const int offset = s * kChunk;
    Check(cudaEventRecord(started[s], streams[s]), "cudaEventRecord");
    Check(cudaMemcpyAsync(da + offset, a.data() + offset, kChunkBytes, cudaMemcpyHostToDevice,
                          streams[s]),
          "cudaMemcpyAsync");
    Check(cudaMemcpyAsync(db + offset, b.data() + offset, kChunkBytes, cudaMemcpyHostToDevice,
                          streams[s]),
          "cudaMemcpyAsync");
    VectorAdd<<<64, 256, 0, streams[s]>>>(da + offset, db + offset, dc + offset, kChunk);
    Check(cudaGetLastError(), "VectorAdd launch");
    Check(cudaMemcpyAsync(c.data() + offset, dc + offset, kChunkBytes, cudaMemcpyDeviceToHost,
                          streams[s]),
          "cudaMemcpyAsync");
    Check(cudaEventRecord(finished[s], streams[s]), "cudaEventRecord");
  }
  for (int s = 0; s < kStreams; ++s) {
    Check(cudaStreamSynchronize(streams[s]), "cudaStreamSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, started[s], finished[s]), "cudaEventElapsedTime");
    std::fprintf(stderr, "vector_add: stream %d took %.3f ms\n", s, ms);
    Check(cudaEventDestroy(started[s]), "cudaEventDestroy");
    Check(cudaEventDestroy(finished[s]), "cudaEventDestroy");
    Check(cudaStreamDestroy(streams[s]), "cudaStreamDestroy");
  }
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Check(cudaFree(da), "cudaFree");
  Check(cudaFree(db), "cudaFree");
  Check(cudaFree(dc), "cudaFree");

  for (int i = 0; i < kN; ++i) {
    if (c[i] != a[i] + b[i]) {
      std::fprintf(stderr, "vector_add: c[%d] = %a, expected %a\n", i, c[i], a[i] + b[i]);
      return 1;
    }
  }
  ndt::programs::PrintChecksum(c.data(), c.size() * sizeof(float));
  return 0;
}
