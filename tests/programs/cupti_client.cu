// A program with a CUPTI client of its own, as torch.profiler's Kineto is: after some CUDA work
// (or, with --early, before its first CUDA call, as a profiler around a whole training run) it
// registers activity buffers, enables kernel activity, launches kernels, flushes and counts
// the kernel records. Its buffers come from a pool of its own, and a buffer CUPTI hands back that
// it did not hand out is an error (a real profiler would free() it and crash). Prints
// "cupti kernels N" and "checksum <hex>"; exit 0 when every buffer was its own.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_checksum.h"

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    c[i] = a[i] + b[i];
  }
}

namespace {

constexpr size_t kBufferBytes = 64 * 1024;
constexpr int kBuffers = 8;
alignas(8) unsigned char pool[kBuffers][kBufferBytes];
bool handed_out[kBuffers] = {};
int kernels = 0;
bool foreign = false;

void CUPTIAPI Request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  for (int i = 0; i < kBuffers; ++i) {
    if (handed_out[i]) continue;
    handed_out[i] = true;
    *buffer = pool[i];
    *size = kBufferBytes;
    return;
  }
}

void CUPTIAPI Complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  int mine = -1;
  for (int i = 0; i < kBuffers; ++i) {
    if (buffer == pool[i]) mine = i;
  }
  if (mine < 0) {
    foreign = true;  // not ours: a real profiler would free() it here
    return;
  }
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ++kernels;
  }
  handed_out[mine] = false;
}

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "cupti_client: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

void Check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  std::fprintf(stderr, "cupti_client: %s: CUPTI error %d\n", what, static_cast<int>(result));
  std::exit(1);
}

void StartProfiler() {
  Check(cuptiActivityRegisterCallbacks(Request, Complete), "cuptiActivityRegisterCallbacks");
  Check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
}

}  // namespace

int main(int argc, char** argv) {
  const bool early = argc > 1 && std::strcmp(argv[1], "--early") == 0;
  if (early) StartProfiler();
  constexpr int kN = 4096;
  std::vector<float> a(kN), b(kN), c(kN);
  for (int i = 0; i < kN; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f;
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  Check(cudaMalloc(&da, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&db, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&dc, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(da, a.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  Check(cudaMemcpy(db, b.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  VectorAdd<<<4, 128>>>(da, db, dc, kN);  // before the profiler (counted with --early)
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  if (!early) StartProfiler();
  const int counted_before = early ? 1 : 0;
  constexpr int kLaunches = 5;
  for (int i = 0; i < kLaunches; ++i) VectorAdd<<<4, 128>>>(dc, db, dc, kN);
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  Check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  Check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");

  Check(cudaMemcpy(c.data(), dc, kN * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::printf("cupti kernels %d\n", kernels);
  ndt::programs::PrintChecksum(c.data(), c.size() * sizeof(float));
  if (foreign) {
    std::fprintf(stderr, "cupti_client: CUPTI handed back a buffer this program did not give\n");
    return 1;
  }
  return kernels == counted_before + kLaunches ? 0 : 1;
}
