// Deterministic: the driver features beyond plain launches, in one program. Two streams with
// different priorities ordered by events (cross-stream waits), allocations from the default
// memory pool and cudaMallocAsync, a stream capture that forks onto the second stream and joins
// back, instantiated once and launched ITERATIONS times (argument 1, default 3), a buffer made
// with the virtual memory API (cuMemCreate + cuMemMap, reached through
// cudaGetDriverEntryPointByVersion), a stream destroyed and another created in its place, and
// finally the driver dlopen()ed RTLD_LOCAL by the program itself, a stream created through the
// cuGetProcAddress_v2 found there. Integer arithmetic with wrap-around: exact everywhere, so the
// checksum is the same on the stand-in and on a GPU, run after run.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_checksum.h"

__global__ void ScaleOffset(unsigned* data, unsigned mul, unsigned add, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = data[i] * mul + add;
  }
}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "streams_graphs: %s: %s (%s)\n", what, cudaGetErrorString(error),
               cudaGetErrorName(error));
  std::exit(1);
}

void CheckDriver(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  std::fprintf(stderr, "streams_graphs: %s: CUresult %d\n", what, static_cast<int>(result));
  std::exit(1);
}

template <typename Pfn>
Pfn DriverEntry(const char* name, unsigned version) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  Check(cudaGetDriverEntryPointByVersion(name, &address, version, cudaEnableDefault, &status),
        name);
  if (status != cudaDriverEntryPointSuccess || address == nullptr) {
    std::fprintf(stderr, "streams_graphs: no driver entry point %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<Pfn>(address);
}

constexpr int kN = 4096;
constexpr size_t kBytes = kN * sizeof(unsigned);

void Scale(unsigned* data, unsigned mul, unsigned add, cudaStream_t stream) {
  ScaleOffset<<<8, 128, 0, stream>>>(data, mul, add, kN);
  Check(cudaGetLastError(), "ScaleOffset");
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 3;
  int least = 0;
  int greatest = 0;
  Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t high;
  cudaStream_t low;
  Check(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest), "high stream");
  Check(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, least), "low stream");
  cudaEvent_t fork_event;
  cudaEvent_t join_event;
  Check(cudaEventCreateWithFlags(&fork_event, cudaEventDisableTiming), "fork event");
  Check(cudaEventCreateWithFlags(&join_event, cudaEventDisableTiming), "join event");

  // Pool and stream-ordered allocations.
  cudaMemPool_t pool;
  Check(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  unsigned* a = nullptr;
  unsigned* b = nullptr;
  Check(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&a), kBytes, pool, high),
        "cudaMallocFromPoolAsync");
  Check(cudaMallocAsync(reinterpret_cast<void**>(&b), kBytes, low), "cudaMallocAsync");

  std::vector<unsigned> input(kN);
  for (int i = 0; i < kN; ++i) input[i] = static_cast<unsigned>(i) * 2654435761u;
  Check(cudaMemcpyAsync(a, input.data(), kBytes, cudaMemcpyHostToDevice, high), "copy in");
  Scale(a, 3, 1, high);
  // b needs a: low waits for high.
  Check(cudaEventRecord(fork_event, high), "record fork");
  Check(cudaStreamWaitEvent(low, fork_event, 0), "low waits");
  Check(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, low), "copy a to b");
  Scale(b, 5, 2, low);
  Check(cudaEventRecord(join_event, low), "record join");
  Check(cudaStreamWaitEvent(high, join_event, 0), "high waits");

  // A graph: a on high, b forked onto low and joined back.
  cudaGraph_t graph;
  Check(cudaStreamBeginCapture(high, cudaStreamCaptureModeGlobal), "begin capture");
  Scale(a, 7, 3, high);
  Check(cudaEventRecord(fork_event, high), "capture: record fork");
  Check(cudaStreamWaitEvent(low, fork_event, 0), "capture: low joins");
  Scale(b, 2, 1, low);
  Check(cudaEventRecord(join_event, low), "capture: record join");
  Check(cudaStreamWaitEvent(high, join_event, 0), "capture: high waits");
  Check(cudaStreamEndCapture(high, &graph), "end capture");
  cudaGraphExec_t exec;
  Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int i = 0; i < iterations; ++i) Check(cudaGraphLaunch(exec, high), "cudaGraphLaunch");

  // A buffer from the virtual memory API.
  const auto granularity_of = DriverEntry<PFN_cuMemGetAllocationGranularity_v10020>(
      "cuMemGetAllocationGranularity", 10020);
  const auto reserve = DriverEntry<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 10020);
  const auto create = DriverEntry<PFN_cuMemCreate_v10020>("cuMemCreate", 10020);
  const auto map = DriverEntry<PFN_cuMemMap_v10020>("cuMemMap", 10020);
  const auto set_access = DriverEntry<PFN_cuMemSetAccess_v10020>("cuMemSetAccess", 10020);
  const auto unmap = DriverEntry<PFN_cuMemUnmap_v10020>("cuMemUnmap", 10020);
  const auto release = DriverEntry<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);
  const auto address_free = DriverEntry<PFN_cuMemAddressFree_v10020>("cuMemAddressFree", 10020);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  CheckDriver(granularity_of(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              "cuMemGetAllocationGranularity");
  const size_t vmm_bytes = (kBytes + granularity - 1) / granularity * granularity;
  CUdeviceptr vmm = 0;
  CUmemGenericAllocationHandle physical = 0;
  CheckDriver(reserve(&vmm, vmm_bytes, 0, 0, 0), "cuMemAddressReserve");
  CheckDriver(create(&physical, vmm_bytes, &prop, 0), "cuMemCreate");
  CheckDriver(map(vmm, vmm_bytes, 0, physical, 0), "cuMemMap");
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CheckDriver(set_access(vmm, vmm_bytes, &access, 1), "cuMemSetAccess");
  auto* mapped = reinterpret_cast<unsigned*>(vmm);
  Check(cudaMemcpyAsync(mapped, a, kBytes, cudaMemcpyDeviceToDevice, high), "copy a to vmm");
  Scale(mapped, 11, 4, high);

  // Results: a and the mapped buffer on high, b on low (finished when join_event is).
  std::vector<unsigned> result(3 * kN);
  Check(cudaMemcpyAsync(result.data(), a, kBytes, cudaMemcpyDeviceToHost, high), "copy a out");
  Check(cudaMemcpyAsync(result.data() + kN, mapped, kBytes, cudaMemcpyDeviceToHost, high),
        "copy vmm out");
  Check(cudaMemcpyAsync(result.data() + 2 * kN, b, kBytes, cudaMemcpyDeviceToHost, low),
        "copy b out");
  Check(cudaEventRecord(join_event, low), "record b done");
  Check(cudaEventSynchronize(join_event), "cudaEventSynchronize");
  Check(cudaStreamSynchronize(high), "cudaStreamSynchronize");

  CheckDriver(unmap(vmm, vmm_bytes), "cuMemUnmap");
  CheckDriver(release(physical), "cuMemRelease");
  CheckDriver(address_free(vmm, vmm_bytes), "cuMemAddressFree");
  Check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  Check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  Check(cudaFreeAsync(a, high), "cudaFreeAsync a");
  Check(cudaFreeAsync(b, low), "cudaFreeAsync b");
  Check(cudaStreamSynchronize(high), "sync high");
  Check(cudaStreamSynchronize(low), "sync low");

  // Streams destroyed and created again until one lands at the first one's handle (the
  // stand-in's allocator gives it back within a few rounds; a GPU driver may never).
  cudaStream_t first;
  Check(cudaStreamCreate(&first), "first stream");
  Check(cudaStreamSynchronize(first), "sync first");
  Check(cudaStreamDestroy(first), "destroy first");
  bool reused = false;
  for (int round = 0; round < 32 && !reused; ++round) {
    cudaStream_t again;
    Check(cudaStreamCreate(&again), "stream again");
    Check(cudaStreamSynchronize(again), "sync again");
    reused = again == first;
    Check(cudaStreamDestroy(again), "destroy again");
  }
  std::fprintf(stderr, "streams_graphs: a later stream at the first one's handle: %s\n",
               reused ? "yes" : "no");

  // The driver loaded again by the program itself, RTLD_LOCAL, used through its own lookup.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "streams_graphs: %s\n", dlerror());
    return 1;
  }
  const auto get_proc_address =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr) return 1;
  void* stream_create = nullptr;
  void* stream_destroy = nullptr;
  CUdriverProcAddressQueryResult status;
  CheckDriver(get_proc_address("cuStreamCreate", &stream_create, 13000,
                               CU_GET_PROC_ADDRESS_DEFAULT, &status),
              "cuGetProcAddress_v2 cuStreamCreate");
  CheckDriver(get_proc_address("cuStreamDestroy", &stream_destroy, 13000,
                               CU_GET_PROC_ADDRESS_DEFAULT, &status),
              "cuGetProcAddress_v2 cuStreamDestroy");
  CUstream late = nullptr;
  CheckDriver(reinterpret_cast<PFN_cuStreamCreate_v2000>(stream_create)(&late, CU_STREAM_DEFAULT),
              "late cuStreamCreate");
  CheckDriver(reinterpret_cast<PFN_cuStreamDestroy_v4000>(stream_destroy)(late),
              "late cuStreamDestroy");

  Check(cudaEventDestroy(fork_event), "destroy fork event");
  Check(cudaEventDestroy(join_event), "destroy join event");
  Check(cudaStreamDestroy(high), "destroy high");
  Check(cudaStreamDestroy(low), "destroy low");

  // The expected result, computed on the host, before the checksum is printed.
  for (int i = 0; i < kN; ++i) {
    unsigned x = input[i] * 3 + 1;
    unsigned y = x * 5 + 2;
    for (int k = 0; k < iterations; ++k) {
      x = x * 7 + 3;
      y = y * 2 + 1;
    }
    if (result[i] != x || result[kN + i] != x * 11 + 4 || result[2 * kN + i] != y) {
      std::fprintf(stderr, "streams_graphs: wrong result at %d\n", i);
      return 1;
    }
  }
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(unsigned));
  return 0;
}
