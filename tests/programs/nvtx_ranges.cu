// A program annotated with NVTX v3 the way real code is: a training-loop shape on the main
// thread (nested push/pop ranges per step and phase, a library's own domain with registered
// strings and named categories, a start/end range across the whole run, marks) and two worker
// threads, each with its own stream, that wrap their kernels and copies in ranges of their own.
// The results are exact, so every run prints the same checksum with or without a tool
// attached.
//
//   nvtx_ranges [--steps N] [--plant]
//
// --plant makes worker 1's reduction a RacySum (float atomicAdd in racing order), whose sums
// enter the checksum: the run is then not reproducible, and the op that breaks it lies inside
// worker 1's ranges "worker 1" > "reduce" > "minilib::reduce".
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "program_checksum.h"

// The kernels have host implementations in the stand-in (tests/standin/standin_kernels.cc).
__global__ void Step(float* data, int n, float add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = data[i] * 0.5f + add;
  }
}

// Exact: one thread per row adds its row in index order.
__global__ void CorpusRowSum(const float* m, float* out, int rows, int cols) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float sum = 0;
  for (int c = 0; c < cols; ++c) sum += m[row * cols + c];
  out[row] = sum;
}

__global__ void RacySum(const float* values, float* sums, int n, int bins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&sums[i % bins], values[i]);
  }
}

namespace {

constexpr int kN = 1 << 14;
constexpr int kBins = 16;
constexpr uint32_t kCategoryCompute = 1;
constexpr uint32_t kCategoryCopy = 2;

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "nvtx_ranges: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

// The library's domain and its registered strings, as a library annotates itself once.
struct Annotations {
  nvtxDomainHandle_t domain = nvtxDomainCreateA("minilib");
  nvtxStringHandle_t scale = nvtxDomainRegisterStringA(domain, "minilib::scale");
  nvtxStringHandle_t reduce = nvtxDomainRegisterStringA(domain, "minilib::reduce");

  Annotations() {
    nvtxDomainNameCategoryA(domain, kCategoryCompute, "compute");
    nvtxDomainNameCategoryA(domain, kCategoryCopy, "copy");
  }
  ~Annotations() { nvtxDomainDestroy(domain); }

  void Push(nvtxStringHandle_t name, uint32_t category) const {
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.category = category;
    attributes.colorType = NVTX_COLOR_ARGB;
    attributes.color = 0xff76b900;
    attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attributes.message.registered = name;
    nvtxDomainRangePushEx(domain, &attributes);
  }
  void Pop() const { nvtxDomainRangePop(domain); }
};

// One worker's step: upload, scale (in the library's domain), reduce, download.
void Worker(const Annotations& annotations, int worker, int step, bool plant,
            std::vector<float>* sums_out) {
  char name[32];
  std::snprintf(name, sizeof(name), "worker %d", worker);
  nvtxRangePushA(name);
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>((i * (worker + 3) + step) % 97) / 7;
  float* values = nullptr;
  float* sums = nullptr;
  Check(cudaMalloc(&values, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&sums, kBins * sizeof(float)), "cudaMalloc");

  nvtxRangePushA("upload");
  Check(cudaMemcpyAsync(values, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, stream),
        "upload");
  nvtxRangePop();

  annotations.Push(annotations.scale, kCategoryCompute);
  Step<<<32, 128, 0, stream>>>(values, kN, static_cast<float>(worker));
  Check(cudaGetLastError(), "Step");
  annotations.Pop();

  nvtxRangePushW(L"reduce");
  annotations.Push(annotations.reduce, kCategoryCompute);
  Check(cudaMemsetAsync(sums, 0, kBins * sizeof(float), stream), "memset");
  if (plant && worker == 1) {
    RacySum<<<64, 128, 0, stream>>>(values, sums, kN, kBins);
  } else {
    CorpusRowSum<<<1, kBins, 0, stream>>>(values, sums, kBins, kN / kBins);
  }
  Check(cudaGetLastError(), "sum");
  annotations.Pop();
  nvtxRangePop();

  nvtxRangePushA("download");
  sums_out->resize(kBins);
  Check(cudaMemcpyAsync(sums_out->data(), sums, kBins * sizeof(float), cudaMemcpyDeviceToHost,
                        stream),
        "download");
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  nvtxRangePop();

  cudaFree(values);
  cudaFree(sums);
  cudaStreamDestroy(stream);
  nvtxRangePop();  // worker N
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 2;
  bool plant = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--plant") == 0) {
      plant = true;
    } else {
      std::fprintf(stderr, "usage: nvtx_ranges [--steps N] [--plant]\n");
      return 2;
    }
  }
  nvtxNameCategoryA(7, "training");
  const nvtxRangeId_t run = nvtxRangeStartA("run");
  Annotations annotations;
  Check(cudaFree(nullptr), "init");
  std::vector<float> all;
  for (int step = 0; step < steps; ++step) {
    char name[32];
    std::snprintf(name, sizeof(name), "step %d", step);
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.category = 7;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = name;
    nvtxRangePushEx(&attributes);
    std::vector<float> sums[2];
    std::thread first(Worker, std::cref(annotations), 0, step, plant, &sums[0]);
    std::thread second(Worker, std::cref(annotations), 1, step, plant, &sums[1]);
    first.join();
    second.join();
    nvtxMarkA("step done");
    for (const auto& part : sums) all.insert(all.end(), part.begin(), part.end());
    nvtxRangePop();
  }
  nvtxRangeEnd(run);
  ndt::programs::PrintChecksum(all.data(), all.size() * sizeof(float));
  return 0;
}
