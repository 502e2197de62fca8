// Tests of the stand-in libcuda.so.1 on its own. The library is dlopen()ed by path and every
// function is fetched through cuGetProcAddress_v2, the way cudart and the CUDA libraries reach
// the real driver.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kCudaVersion = 13000;

void* StandinHandle() {
  static void* handle = dlopen(NDT_STANDIN_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  return handle;
}

PFN_cuGetProcAddress_v12000 GetProcAddress() {
  auto* gpa =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(StandinHandle(), "cuGetProcAddress_v2"));
  REQUIRE(gpa != nullptr);
  return gpa;
}

// The address cuGetProcAddress_v2 gives for `name`, or null.
void* Proc(const char* name, int version = kCudaVersion,
           cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  if (GetProcAddress()(name, &pfn, version, flags, &status) != CUDA_SUCCESS) return nullptr;
  return pfn;
}

void* Sym(const char* name) {
  return dlsym(StandinHandle(), name);
}

template <typename Pfn>
Pfn Get(const char* name) {
  void* pfn = Proc(name);
  INFO(name);
  REQUIRE(pfn != nullptr);
  return reinterpret_cast<Pfn>(pfn);
}

// The driver functions the tests call, fetched as cudart would fetch them.
struct Api {
  PFN_cuInit_v2000 cuInit = Get<PFN_cuInit_v2000>("cuInit");
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion =
      Get<PFN_cuDriverGetVersion_v2020>("cuDriverGetVersion");
  PFN_cuDeviceGet_v2000 cuDeviceGet = Get<PFN_cuDeviceGet_v2000>("cuDeviceGet");
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = Get<PFN_cuDeviceGetCount_v2000>("cuDeviceGetCount");
  PFN_cuDeviceGetName_v2000 cuDeviceGetName = Get<PFN_cuDeviceGetName_v2000>("cuDeviceGetName");
  PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid = Get<PFN_cuDeviceGetUuid_v11040>("cuDeviceGetUuid");
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute =
      Get<PFN_cuDeviceGetAttribute_v2000>("cuDeviceGetAttribute");
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem = Get<PFN_cuDeviceTotalMem_v3020>("cuDeviceTotalMem");
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain =
      Get<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain");
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = Get<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent");
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = Get<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent");
  PFN_cuMemAlloc_v3020 cuMemAlloc = Get<PFN_cuMemAlloc_v3020>("cuMemAlloc");
  PFN_cuMemFree_v3020 cuMemFree = Get<PFN_cuMemFree_v3020>("cuMemFree");
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD = Get<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD");
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH = Get<PFN_cuMemcpyDtoH_v3020>("cuMemcpyDtoH");
  PFN_cuMemcpyDtoD_v3020 cuMemcpyDtoD = Get<PFN_cuMemcpyDtoD_v3020>("cuMemcpyDtoD");
  PFN_cuMemcpy_v4000 cuMemcpy = Get<PFN_cuMemcpy_v4000>("cuMemcpy");
  PFN_cuMemsetD8_v3020 cuMemsetD8 = Get<PFN_cuMemsetD8_v3020>("cuMemsetD8");
  PFN_cuMemsetD32_v3020 cuMemsetD32 = Get<PFN_cuMemsetD32_v3020>("cuMemsetD32");
  PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute =
      Get<PFN_cuPointerGetAttribute_v4000>("cuPointerGetAttribute");
  PFN_cuMemGetAddressRange_v3020 cuMemGetAddressRange =
      Get<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange");
  PFN_cuStreamCreate_v2000 cuStreamCreate = Get<PFN_cuStreamCreate_v2000>("cuStreamCreate");
  PFN_cuStreamDestroy_v4000 cuStreamDestroy = Get<PFN_cuStreamDestroy_v4000>("cuStreamDestroy");
  PFN_cuStreamQuery_v2000 cuStreamQuery = Get<PFN_cuStreamQuery_v2000>("cuStreamQuery");
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize =
      Get<PFN_cuStreamSynchronize_v2000>("cuStreamSynchronize");
  PFN_cuEventCreate_v2000 cuEventCreate = Get<PFN_cuEventCreate_v2000>("cuEventCreate");
  PFN_cuEventRecord_v2000 cuEventRecord = Get<PFN_cuEventRecord_v2000>("cuEventRecord");
  PFN_cuEventElapsedTime_v12080 cuEventElapsedTime =
      Get<PFN_cuEventElapsedTime_v12080>("cuEventElapsedTime");
  PFN_cuEventDestroy_v4000 cuEventDestroy = Get<PFN_cuEventDestroy_v4000>("cuEventDestroy");
  PFN_cuModuleLoadData_v2000 cuModuleLoadData = Get<PFN_cuModuleLoadData_v2000>("cuModuleLoadData");
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction =
      Get<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction");
  PFN_cuModuleUnload_v2000 cuModuleUnload = Get<PFN_cuModuleUnload_v2000>("cuModuleUnload");
  PFN_cuFuncGetParamInfo_v12040 cuFuncGetParamInfo =
      Get<PFN_cuFuncGetParamInfo_v12040>("cuFuncGetParamInfo");
  PFN_cuFuncGetName_v12030 cuFuncGetName = Get<PFN_cuFuncGetName_v12030>("cuFuncGetName");
  PFN_cuLibraryLoadData_v12000 cuLibraryLoadData =
      Get<PFN_cuLibraryLoadData_v12000>("cuLibraryLoadData");
  PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel =
      Get<PFN_cuLibraryGetKernel_v12000>("cuLibraryGetKernel");
  PFN_cuLibraryGetModule_v12000 cuLibraryGetModule =
      Get<PFN_cuLibraryGetModule_v12000>("cuLibraryGetModule");
  PFN_cuLibraryUnload_v12000 cuLibraryUnload = Get<PFN_cuLibraryUnload_v12000>("cuLibraryUnload");
  PFN_cuKernelGetFunction_v12000 cuKernelGetFunction =
      Get<PFN_cuKernelGetFunction_v12000>("cuKernelGetFunction");
  PFN_cuKernelGetParamInfo_v12040 cuKernelGetParamInfo =
      Get<PFN_cuKernelGetParamInfo_v12040>("cuKernelGetParamInfo");
  PFN_cuLaunchKernel_v4000 cuLaunchKernel = Get<PFN_cuLaunchKernel_v4000>("cuLaunchKernel");
  PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx =
      Get<PFN_cuLaunchKernelEx_v11060>("cuLaunchKernelEx");
  PFN_cuGetErrorName_v6000 cuGetErrorName = Get<PFN_cuGetErrorName_v6000>("cuGetErrorName");
  PFN_cuGetErrorString_v6000 cuGetErrorString = Get<PFN_cuGetErrorString_v6000>("cuGetErrorString");
};

// The stand-in initialized, with its primary context current on the calling thread.
const Api& Driver() {
  static const Api api;
  REQUIRE(api.cuInit(0) == CUDA_SUCCESS);
  CUcontext current = nullptr;
  REQUIRE(api.cuCtxGetCurrent(&current) == CUDA_SUCCESS);
  if (current == nullptr) {
    CUcontext primary = nullptr;
    REQUIRE(api.cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
    REQUIRE(api.cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  }
  return api;
}

constexpr char kVectorAdd[] = "_Z9VectorAddPKfS0_Pfi";
constexpr char kRacySum[] = "_Z7RacySumPKfPfii";

// A minimal fat binary: the 16-byte header (magic, version 1, header size 16, payload size) and
// a payload naming the test kernels. The stand-in only needs to know its size.
std::vector<std::uint64_t> FakeFatbin() {
  const std::string payload = std::string(kVectorAdd) + '\0' + kRacySum + '\0';
  const std::uint64_t padded = (payload.size() + 7) / 8 * 8;
  std::vector<std::uint64_t> image(2 + padded / 8, 0);
  image[0] = 0x0010'0001'BA55'ED50ull;  // u32 magic, u16 version, u16 header size
  image[1] = padded;
  std::memcpy(&image[2], payload.data(), payload.size());
  return image;
}

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) : size(bytes) {
    REQUIRE(Driver().cuMemAlloc(&address, bytes) == CUDA_SUCCESS);
  }
  ~DeviceBuffer() { Driver().cuMemFree(address); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address = 0;
  std::size_t size;
};

// Runs in a process of its own (see the next test), where nothing has called cuInit yet.
TEST_CASE("(child process) calls before cuInit fail", "[.][standin_fresh_process]") {
  auto* device_get_count = reinterpret_cast<PFN_cuDeviceGetCount_v2000>(Proc("cuDeviceGetCount"));
  auto* init = reinterpret_cast<PFN_cuInit_v2000>(Proc("cuInit"));
  REQUIRE(device_get_count != nullptr);
  REQUIRE(init != nullptr);
  int count = -1;
  CHECK(device_get_count(&count) == CUDA_ERROR_NOT_INITIALIZED);
  CHECK(init(1) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(init(0) == CUDA_SUCCESS);
  CHECK(device_get_count(&count) == CUDA_SUCCESS);
  CHECK(count == 1);
}

TEST_CASE("a fresh stand-in driver refuses calls before cuInit", "[standin]") {
  // Earlier tests in this process may have initialized the driver: ask a fresh process.
  char self[] = "/proc/self/exe";
  char filter[] = "[standin_fresh_process]";
  char* argv[] = {self, filter, nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, self, nullptr, nullptr, argv, environ) == 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("cuGetProcAddress_v2 hands out the ABI variant a CUDA version selects", "[standin]") {
  CHECK(Proc("cuMemAlloc") == Sym("cuMemAlloc_v2"));
  CHECK(Proc("cuMemAlloc", 3000) == Sym("cuMemAlloc"));
  CHECK(Proc("cuMemFree") == Sym("cuMemFree_v2"));
  CHECK(Proc("cuMemcpyHtoD") == Sym("cuMemcpyHtoD_v2"));
  CHECK(Proc("cuStreamDestroy") == Sym("cuStreamDestroy_v2"));
  CHECK(Proc("cuStreamDestroy", 3020) == Sym("cuStreamDestroy"));
  CHECK(Proc("cuEventElapsedTime", 12000) == Sym("cuEventElapsedTime"));
  CHECK(Proc("cuEventElapsedTime", 12080) == Sym("cuEventElapsedTime_v2"));
  CHECK(Proc("cuDeviceGetUuid") == Sym("cuDeviceGetUuid_v2"));
  CHECK(Proc("cuDevicePrimaryCtxRelease") == Sym("cuDevicePrimaryCtxRelease_v2"));
  CHECK(Proc("cuLaunchKernel") == Sym("cuLaunchKernel"));
  CHECK(Proc("cuGetProcAddress") == Sym("cuGetProcAddress_v2"));
  CHECK(Proc("cuGetProcAddress", 11030) == Sym("cuGetProcAddress"));
  CHECK(Proc("cuMemAlloc") != nullptr);
}

TEST_CASE("cuGetProcAddress_v2 hands out per-thread default stream variants on request",
          "[standin]") {
  constexpr cuuint64_t kPtds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  CHECK(Proc("cuLaunchKernel", kCudaVersion, kPtds) == Sym("cuLaunchKernel_ptsz"));
  CHECK(Proc("cuLaunchKernel", kCudaVersion, kLegacy) == Sym("cuLaunchKernel"));
  CHECK(Proc("cuLaunchKernelEx", kCudaVersion, kPtds) == Sym("cuLaunchKernelEx_ptsz"));
  CHECK(Proc("cuMemcpyHtoD", kCudaVersion, kPtds) == Sym("cuMemcpyHtoD_v2_ptds"));
  CHECK(Proc("cuMemcpyHtoDAsync", kCudaVersion, kPtds) == Sym("cuMemcpyHtoDAsync_v2_ptsz"));
  CHECK(Proc("cuMemcpy", kCudaVersion, kPtds) == Sym("cuMemcpy_ptds"));
  CHECK(Proc("cuEventRecord", kCudaVersion, kPtds) == Sym("cuEventRecord_ptsz"));
  CHECK(Proc("cuStreamSynchronize", kCudaVersion, kPtds) == Sym("cuStreamSynchronize_ptsz"));
  // Functions without a stream have one variant whatever the flags.
  CHECK(Proc("cuMemAlloc", kCudaVersion, kPtds) == Sym("cuMemAlloc_v2"));
}

TEST_CASE("cuGetProcAddress_v2 reports unknown names and functions newer than the caller",
          "[standin]") {
  const auto gpa = GetProcAddress();
  void* pfn = &pfn;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CHECK(gpa("cuNoSuchFunction", &pfn, kCudaVersion, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(pfn == nullptr);
  CHECK(gpa("cuMemAlloc_v2", &pfn, kCudaVersion, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(gpa("cuLibraryLoadData", &pfn, 11080, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(gpa("cuMemAlloc", &pfn, kCudaVersion, 4, &status) == CUDA_ERROR_INVALID_VALUE);
  CHECK(gpa(nullptr, &pfn, kCudaVersion, 0, &status) == CUDA_ERROR_INVALID_VALUE);

  auto* legacy = reinterpret_cast<PFN_cuGetProcAddress_v11030>(Sym("cuGetProcAddress"));
  REQUIRE(legacy != nullptr);
  CHECK(legacy("cuMemAlloc", &pfn, kCudaVersion, 0) == CUDA_SUCCESS);
  CHECK(pfn == Sym("cuMemAlloc_v2"));
  CHECK(legacy("cuNoSuchFunction", &pfn, kCudaVersion, 0) == CUDA_ERROR_NOT_FOUND);
}

TEST_CASE("every entry point of the real driver is exported", "[standin]") {
  const char* const kNames[] = {
#define NDT_DRIVER_ENTRY_POINT(name) #name,
#include "standin_driver_entry_points.inc"
#undef NDT_DRIVER_ENTRY_POINT
  };
  CHECK(std::size(kNames) > 600);
  for (const char* name : kNames) {
    INFO(name);
    CHECK(Sym(name) != nullptr);
  }
}

TEST_CASE("unimplemented driver entry points fail with CUDA_ERROR_NOT_SUPPORTED", "[standin]") {
  // Through cuGetProcAddress, as cudart would reach them.
  auto* graph_create = reinterpret_cast<PFN_cuGraphCreate_v10000>(Proc("cuGraphCreate"));
  REQUIRE(graph_create != nullptr);
  CUgraph graph = nullptr;
  CHECK(graph_create(&graph, 0) == CUDA_ERROR_NOT_SUPPORTED);
  // Through dlsym, as Triton would.
  auto* array_create = reinterpret_cast<PFN_cuArrayCreate_v3020>(Sym("cuArrayCreate_v2"));
  REQUIRE(array_create != nullptr);
  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR descriptor{};
  CHECK(array_create(&array, &descriptor) == CUDA_ERROR_NOT_SUPPORTED);
  // The 32-bit cuMemAlloc of CUDA < 3.2.
  using MemAllocV1 = CUresult (*)(unsigned int* dptr, unsigned int bytesize);
  auto* alloc_v1 = reinterpret_cast<MemAllocV1>(Proc("cuMemAlloc", 3000));
  REQUIRE(alloc_v1 != nullptr);
  unsigned int small = 0;
  CHECK(alloc_v1(&small, 64) == CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("device queries describe the stand-in device", "[standin]") {
  const Api& api = Driver();
  int version = 0;
  CHECK(api.cuDriverGetVersion(&version) == CUDA_SUCCESS);
  CHECK(version == 13000);
  int count = 0;
  CHECK(api.cuDeviceGetCount(&count) == CUDA_SUCCESS);
  CHECK(count == 1);
  CUdevice device = -1;
  CHECK(api.cuDeviceGet(&device, 0) == CUDA_SUCCESS);
  CHECK(device == 0);
  CHECK(api.cuDeviceGet(&device, 1) == CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  CHECK(api.cuDeviceGetName(name, sizeof(name), 0) == CUDA_SUCCESS);
  CHECK(std::string(name) == "ndtrace stand-in device");
  CUuuid uuid;
  CHECK(api.cuDeviceGetUuid(&uuid, 0) == CUDA_SUCCESS);
  size_t total = 0;
  CHECK(api.cuDeviceTotalMem(&total, 0) == CUDA_SUCCESS);
  CHECK(total > 0);
  const auto attribute = [&](CUdevice_attribute a) {
    int value = -1;
    REQUIRE(api.cuDeviceGetAttribute(&value, a, 0) == CUDA_SUCCESS);
    return value;
  };
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == 4);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE) == 32);
  CHECK(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024);
  int value = 0;
  CHECK(api.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 3) ==
        CUDA_ERROR_INVALID_DEVICE);
}

TEST_CASE("a memory pool keeps its attributes and counts what its allocations use", "[standin]") {
  Driver();  // the primary context is current on this thread
  auto* get_default =
      reinterpret_cast<PFN_cuDeviceGetDefaultMemPool_v11020>(Proc("cuDeviceGetDefaultMemPool"));
  auto* set = reinterpret_cast<PFN_cuMemPoolSetAttribute_v11020>(Proc("cuMemPoolSetAttribute"));
  auto* get = reinterpret_cast<PFN_cuMemPoolGetAttribute_v11020>(Proc("cuMemPoolGetAttribute"));
  auto* trim = reinterpret_cast<PFN_cuMemPoolTrimTo_v11020>(Proc("cuMemPoolTrimTo"));
  auto* allocate = reinterpret_cast<PFN_cuMemAllocAsync_v11020>(Proc("cuMemAllocAsync"));
  auto* free_async = reinterpret_cast<PFN_cuMemFreeAsync_v11020>(Proc("cuMemFreeAsync"));
  REQUIRE((get_default && set && get && trim && allocate && free_async));
  CUmemoryPool pool = nullptr;
  REQUIRE(get_default(&pool, 0) == CUDA_SUCCESS);
  // PyTorch's cudaMallocAsync backend keeps freed memory in the pool.
  cuuint64_t threshold = UINT64_MAX;
  CHECK(set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) == CUDA_SUCCESS);
  cuuint64_t value = 0;
  CHECK(get(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value) == CUDA_SUCCESS);
  CHECK(value == UINT64_MAX);
  const auto figure = [&](CUmemPool_attribute attribute) {
    cuuint64_t v = 1;
    REQUIRE(get(pool, attribute, &v) == CUDA_SUCCESS);
    return v;
  };
  const cuuint64_t before = figure(CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  CUdeviceptr p = 0;
  REQUIRE(allocate(&p, 1000, nullptr) == CUDA_SUCCESS);
  CHECK(figure(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == before + 1000);
  CHECK(figure(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == before + 1000);
  CHECK(figure(CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= before + 1000);
  REQUIRE(free_async(p, nullptr) == CUDA_SUCCESS);
  CHECK(figure(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == before);
  // A high mark resets to the current figure, with 0 only; current figures are read-only.
  cuuint64_t zero = 0, five = 5;
  CHECK(set(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero) == CUDA_SUCCESS);
  CHECK(figure(CU_MEMPOOL_ATTR_USED_MEM_HIGH) == before);
  CHECK(set(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five) == CUDA_ERROR_INVALID_VALUE);
  CHECK(set(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero) == CUDA_ERROR_INVALID_VALUE);
  CHECK(trim(pool, 0) == CUDA_SUCCESS);
  int unknown = 0;
  CHECK(trim(reinterpret_cast<CUmemoryPool>(&unknown), 0) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("memory calls need a current context", "[standin]") {
  const Api& api = Driver();  // the primary context is current on this thread only
  CUresult on_other_thread = CUDA_SUCCESS;
  std::thread([&] {
    CUdeviceptr p = 0;
    on_other_thread = api.cuMemAlloc(&p, 16);
  }).join();
  CHECK(on_other_thread == CUDA_ERROR_INVALID_CONTEXT);
}

TEST_CASE("device memory round-trips through copies and memsets", "[standin]") {
  const Api& api = Driver();
  DeviceBuffer a(64), b(64);
  std::vector<std::uint32_t> host(16);
  for (std::uint32_t i = 0; i < 16; ++i) host[i] = i * 3 + 1;
  REQUIRE(api.cuMemcpyHtoD(a.address, host.data(), 64) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyDtoD(b.address, a.address, 64) == CUDA_SUCCESS);
  std::vector<std::uint32_t> back(16);
  REQUIRE(api.cuMemcpyDtoH(back.data(), b.address, 64) == CUDA_SUCCESS);
  CHECK(back == host);

  REQUIRE(api.cuMemsetD32(b.address + 8, 0xDEADBEEF, 2) == CUDA_SUCCESS);
  REQUIRE(api.cuMemsetD8(b.address + 60, 0xAB, 4) == CUDA_SUCCESS);
  // Unified addressing: cuMemcpy works out each side from the allocation table.
  REQUIRE(api.cuMemcpy(reinterpret_cast<CUdeviceptr>(back.data()), b.address, 64) == CUDA_SUCCESS);
  CHECK(back[1] == host[1]);
  CHECK(back[2] == 0xDEADBEEF);
  CHECK(back[3] == 0xDEADBEEF);
  CHECK(back[4] == host[4]);
  CHECK(back[15] == 0xABABABAB);
}

TEST_CASE("the allocation table answers pointer queries and rejects bad pointers", "[standin]") {
  const Api& api = Driver();
  DeviceBuffer a(1000), b(24);
  CHECK((a.address + a.size <= b.address || b.address + b.size <= a.address));

  CUdeviceptr start = 0;
  size_t size = 0;
  CHECK(api.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a.address + 100) ==
        CUDA_SUCCESS);
  CHECK(start == a.address);
  CHECK(api.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a.address + 999) ==
        CUDA_SUCCESS);
  CHECK(size == 1000);
  unsigned long long id_a = 0, id_b = 0;
  CHECK(api.cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, a.address) ==
        CUDA_SUCCESS);
  CHECK(api.cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, b.address) ==
        CUDA_SUCCESS);
  CHECK(id_a != id_b);
  CUdeviceptr base = 0;
  CHECK(api.cuMemGetAddressRange(&base, &size, b.address + 23) == CUDA_SUCCESS);
  CHECK(base == b.address);
  CHECK(size == 24);

  int on_stack = 0;
  const auto host = reinterpret_cast<CUdeviceptr>(&on_stack);
  CHECK(api.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, host) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  a.address + 1000) == CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuMemGetAddressRange(&base, &size, host) == CUDA_ERROR_NOT_FOUND);
  std::vector<char> bytes(2000);
  CHECK(api.cuMemcpyHtoD(a.address + 1, bytes.data(), 1000) == CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuMemcpyDtoH(bytes.data(), host, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuMemsetD32(a.address + 2, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuMemFree(a.address + 8) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr none = 0;
  CHECK(api.cuMemAlloc(&none, 0) == CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr once = 0;
  REQUIRE(api.cuMemAlloc(&once, 8) == CUDA_SUCCESS);
  CHECK(api.cuMemFree(once) == CUDA_SUCCESS);
  CHECK(api.cuMemFree(once) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("a freed device range is handed out again, zeroed, with a new buffer id", "[standin]") {
  // As the driver does: programs (and a caching allocator that empties its cache) see the
  // same addresses again, and the tracer must tell the new allocation from the old one.
  const Api& api = Driver();
  CUdeviceptr first = 0, other = 0;
  REQUIRE(api.cuMemAlloc(&first, 3000) == CUDA_SUCCESS);
  REQUIRE(api.cuMemAlloc(&other, 1 << 16) == CUDA_SUCCESS);
  unsigned long long id_before = 0, id_after = 0;
  REQUIRE(api.cuPointerGetAttribute(&id_before, CU_POINTER_ATTRIBUTE_BUFFER_ID, first) ==
          CUDA_SUCCESS);
  REQUIRE(api.cuMemsetD8(first, 0x5A, 3000) == CUDA_SUCCESS);
  REQUIRE(api.cuMemFree(first) == CUDA_SUCCESS);

  CUdeviceptr again = 0;
  REQUIRE(api.cuMemAlloc(&again, 2900) == CUDA_SUCCESS);  // the same 256-byte granules
  CHECK(again == first);
  REQUIRE(api.cuPointerGetAttribute(&id_after, CU_POINTER_ATTRIBUTE_BUFFER_ID, again) ==
          CUDA_SUCCESS);
  CHECK(id_after != id_before);
  size_t size = 0;
  CUdeviceptr base = 0;
  REQUIRE(api.cuMemGetAddressRange(&base, &size, again) == CUDA_SUCCESS);
  CHECK(size == 2900);
  std::vector<unsigned char> bytes(2900, 1);
  REQUIRE(api.cuMemcpyDtoH(bytes.data(), again, bytes.size()) == CUDA_SUCCESS);
  CHECK(bytes == std::vector<unsigned char>(2900, 0));

  // Another size does not take the range; the newest freed range of a size is reused first.
  CUdeviceptr small = 0, b = 0, next = 0;
  REQUIRE(api.cuMemFree(other) == CUDA_SUCCESS);
  REQUIRE(api.cuMemAlloc(&small, 64) == CUDA_SUCCESS);
  CHECK((small < other || small >= other + (1 << 16)));
  REQUIRE(api.cuMemAlloc(&b, 1 << 16) == CUDA_SUCCESS);
  CHECK(b == other);
  REQUIRE(api.cuMemAlloc(&other, 1 << 16) == CUDA_SUCCESS);
  REQUIRE(api.cuMemFree(other) == CUDA_SUCCESS);
  REQUIRE(api.cuMemFree(b) == CUDA_SUCCESS);
  REQUIRE(api.cuMemAlloc(&next, 1 << 16) == CUDA_SUCCESS);
  CHECK(next == b);
  for (CUdeviceptr p : {again, small, next}) CHECK(api.cuMemFree(p) == CUDA_SUCCESS);
}

TEST_CASE("events time work with a steady clock and streams run it in order", "[standin]") {
  const Api& api = Driver();
  CUstream stream = nullptr;
  REQUIRE(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUevent begin = nullptr, end = nullptr, untimed = nullptr, unrecorded = nullptr;
  REQUIRE(api.cuEventCreate(&begin, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(api.cuEventCreate(&end, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(api.cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  REQUIRE(api.cuEventCreate(&unrecorded, CU_EVENT_DEFAULT) == CUDA_SUCCESS);

  REQUIRE(api.cuEventRecord(begin, stream) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(api.cuEventRecord(end, stream) == CUDA_SUCCESS);
  REQUIRE(api.cuEventRecord(untimed, stream) == CUDA_SUCCESS);
  CHECK(api.cuStreamQuery(stream) == CUDA_SUCCESS);
  CHECK(api.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  float ms = 0;
  CHECK(api.cuEventElapsedTime(&ms, begin, end) == CUDA_SUCCESS);
  CHECK(ms >= 19.0f);
  CHECK(api.cuEventElapsedTime(&ms, begin, untimed) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(api.cuEventElapsedTime(&ms, begin, unrecorded) == CUDA_ERROR_INVALID_HANDLE);

  for (CUevent e : {begin, end, untimed, unrecorded}) CHECK(api.cuEventDestroy(e) == CUDA_SUCCESS);
  CHECK(api.cuEventDestroy(begin) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(api.cuStreamDestroy(stream) == CUDA_SUCCESS);
  CHECK(api.cuStreamDestroy(stream) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(api.cuStreamQuery(stream) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("modules find kernels by mangled name and run their host implementations", "[standin]") {
  const Api& api = Driver();
  const std::vector<std::uint64_t> image = FakeFatbin();
  CUmodule module = nullptr;
  REQUIRE(api.cuModuleLoadData(&module, image.data()) == CUDA_SUCCESS);
  CUfunction add = nullptr;
  REQUIRE(api.cuModuleGetFunction(&add, module, kVectorAdd) == CUDA_SUCCESS);
  CUfunction missing = nullptr;
  // A kernel with no host implementation cannot run here: an error, and stderr names it, once.
  char stderr_path[] = "/tmp/ndt_standin_stderr_XXXXXX";
  const int captured = mkstemp(stderr_path);
  REQUIRE(captured >= 0);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(captured, STDERR_FILENO);
  const CUresult first = api.cuModuleGetFunction(&missing, module, "_Z7MissingPf");
  const CUresult again = api.cuModuleGetFunction(&missing, module, "_Z7MissingPf");
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(captured);
  CHECK(first == CUDA_ERROR_NOT_FOUND);
  CHECK(again == CUDA_ERROR_NOT_FOUND);
  std::FILE* said = std::fopen(stderr_path, "r");
  REQUIRE(said != nullptr);
  char line[512] = {};
  std::string text;
  while (std::fgets(line, sizeof(line), said) != nullptr) text += line;
  std::fclose(said);
  std::remove(stderr_path);
  CHECK(text ==
        "ndtrace stand-in device: kernel _Z7MissingPf has no host implementation, so it cannot run "
        "here (CUDA_ERROR_NOT_FOUND); the stand-in runs only the kernels tests/standin/README.md "
        "lists: run this program on a GPU\n");
  const char* name = nullptr;
  CHECK(api.cuFuncGetName(&name, add) == CUDA_SUCCESS);
  CHECK(std::string(name) == kVectorAdd);

  std::vector<std::pair<size_t, size_t>> layout;
  size_t offset = 0, size = 0;
  for (size_t i = 0; api.cuFuncGetParamInfo(add, i, &offset, &size) == CUDA_SUCCESS; ++i) {
    layout.emplace_back(offset, size);
  }
  CHECK(layout == std::vector<std::pair<size_t, size_t>>{{0, 8}, {8, 8}, {16, 8}, {24, 4}});

  constexpr int kN = 1000;
  DeviceBuffer a(kN * 4), b(kN * 4), c(kN * 4);
  std::vector<float> ha(kN), hb(kN), hc(kN);
  for (int i = 0; i < kN; ++i) {
    ha[i] = static_cast<float>(i);
    hb[i] = 0.5f;
  }
  REQUIRE(api.cuMemcpyHtoD(a.address, ha.data(), kN * 4) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyHtoD(b.address, hb.data(), kN * 4) == CUDA_SUCCESS);
  int n = kN;
  void* params[] = {&a.address, &b.address, &c.address, &n};
  REQUIRE(api.cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyDtoH(hc.data(), c.address, kN * 4) == CUDA_SUCCESS);
  CHECK(hc[0] == 0.5f);
  CHECK(hc[999] == 999.5f);

  // The same launch with its arguments packed into one buffer behind `extra`.
  struct {
    CUdeviceptr a, b, c;
    int n;
  } packed{b.address, b.address, c.address, kN};
  size_t packed_size = sizeof(packed);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  REQUIRE(api.cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyDtoH(hc.data(), c.address, kN * 4) == CUDA_SUCCESS);
  CHECK(hc[7] == 1.0f);

  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 64;
  config.blockDimY = config.blockDimZ = 1;
  CHECK(api.cuLaunchKernelEx(&config, add, params, nullptr) == CUDA_SUCCESS);

  // Faults and bad launches are errors, not crashes.
  CUdeviceptr bogus = c.address + 8;  // the last 8 bytes of the range run past the allocation
  void* bad_params[] = {&a.address, &b.address, &bogus, &n};
  CHECK(api.cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, nullptr, bad_params, nullptr) ==
        CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(api.cuLaunchKernel(add, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuLaunchKernel(add, 0, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, nullptr, params, extra) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(api.cuFuncGetParamInfo(add, 4, &offset, &size) == CUDA_ERROR_INVALID_VALUE);

  CHECK(api.cuModuleUnload(module) == CUDA_SUCCESS);
  CHECK(api.cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr) ==
        CUDA_ERROR_INVALID_HANDLE);
  const char garbage[] = {'\x01', '\x02', '\x03', '\x04', 0, 0, 0, 0};
  CHECK(api.cuModuleLoadData(&module, garbage) == CUDA_ERROR_INVALID_IMAGE);
}

TEST_CASE("mapped pinned host memory is reachable by kernels and copies in stream order",
          "[standin]") {
  const Api& api = Driver();
  const auto host_alloc = Get<PFN_cuMemHostAlloc_v2020>("cuMemHostAlloc");
  const auto device_pointer = Get<PFN_cuMemHostGetDevicePointer_v3020>("cuMemHostGetDevicePointer");
  const auto free_host = Get<PFN_cuMemFreeHost_v2000>("cuMemFreeHost");
  void* host = nullptr;
  REQUIRE(host_alloc(&host, 128, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) ==
          CUDA_SUCCESS);
  CUdeviceptr mapped = 0;
  REQUIRE(device_pointer(&mapped, host, 0) == CUDA_SUCCESS);
  unsigned type = 0;
  CHECK(api.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, mapped) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_HOST);

  // A device-to-device copy into it and a kernel writing it: the host sees both at once (work
  // runs when it is enqueued).
  DeviceBuffer source(16);
  REQUIRE(api.cuMemsetD32(source.address, 0x01020304u, 4) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyDtoD(mapped, source.address, 16) == CUDA_SUCCESS);
  CHECK(static_cast<const uint32_t*>(host)[3] == 0x01020304u);
  const std::vector<std::uint64_t> image = FakeFatbin();
  CUmodule module = nullptr;
  REQUIRE(api.cuModuleLoadData(&module, image.data()) == CUDA_SUCCESS);
  CUfunction digest = nullptr;
  REQUIRE(api.cuModuleGetFunction(&digest, module, "ndt_digest_v1") == CUDA_SUCCESS);
  DeviceBuffer scratch(64);
  unsigned long long bytes = 0, partials = 0, ticket = 42;
  CUdeviceptr out = mapped + 64;
  void* params[] = {&source.address, &bytes, &scratch.address, &partials, &out, &ticket};
  REQUIRE(api.cuLaunchKernel(digest, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr) ==
          CUDA_SUCCESS);
  CHECK(static_cast<const uint64_t*>(host)[8 + 7] == 42);
  CHECK(api.cuModuleUnload(module) == CUDA_SUCCESS);

  // Each kind of memory is freed by its own call only.
  CHECK(api.cuMemFree(mapped) == CUDA_ERROR_INVALID_VALUE);
  CHECK(free_host(reinterpret_cast<void*>(source.address)) == CUDA_ERROR_INVALID_VALUE);
  int on_stack = 0;
  CHECK(device_pointer(&mapped, &on_stack, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(host_alloc(&host, 64, 0x80) == CUDA_ERROR_INVALID_VALUE);
  CHECK(free_host(host) == CUDA_SUCCESS);
  CHECK(device_pointer(&mapped, host, 0) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("libraries launch kernels through a CUkernel cast to CUfunction", "[standin]") {
  const Api& api = Driver();
  const std::vector<std::uint64_t> image = FakeFatbin();
  CUlibrary library = nullptr;
  REQUIRE(api.cuLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0) ==
          CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  REQUIRE(api.cuLibraryGetKernel(&kernel, library, kVectorAdd) == CUDA_SUCCESS);
  CUkernel again = nullptr;
  REQUIRE(api.cuLibraryGetKernel(&again, library, kVectorAdd) == CUDA_SUCCESS);
  CHECK(again == kernel);
  size_t offset = 0, size = 0;
  CHECK(api.cuKernelGetParamInfo(kernel, 3, &offset, &size) == CUDA_SUCCESS);
  CHECK(offset == 24);
  CHECK(size == 4);

  DeviceBuffer a(16), c(16);
  const float ones[4] = {1, 1, 1, 1};
  REQUIRE(api.cuMemcpyHtoD(a.address, ones, 16) == CUDA_SUCCESS);
  int n = 4;
  void* params[] = {&a.address, &a.address, &c.address, &n};
  CHECK(api.cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 1, 1, 1, 4, 1, 1, 0, nullptr,
                           params, nullptr) == CUDA_SUCCESS);
  float out[4] = {};
  REQUIRE(api.cuMemcpyDtoH(out, c.address, 16) == CUDA_SUCCESS);
  CHECK(out[3] == 2.0f);

  CUfunction function = nullptr;
  REQUIRE(api.cuKernelGetFunction(&function, kernel) == CUDA_SUCCESS);
  CHECK(api.cuLaunchKernel(function, 1, 1, 1, 4, 1, 1, 0, nullptr, params, nullptr) ==
        CUDA_SUCCESS);
  CUmodule module = nullptr;
  REQUIRE(api.cuLibraryGetModule(&module, library) == CUDA_SUCCESS);
  CUfunction same = nullptr;
  REQUIRE(api.cuModuleGetFunction(&same, module, kVectorAdd) == CUDA_SUCCESS);
  CHECK(same == function);

  REQUIRE(api.cuLibraryUnload(library) == CUDA_SUCCESS);
  CHECK(api.cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), 1, 1, 1, 4, 1, 1, 0, nullptr,
                           params, nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(api.cuLaunchKernel(function, 1, 1, 1, 4, 1, 1, 0, nullptr, params, nullptr) ==
        CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("the racy sum kernel gives different bits from run to run", "[standin]") {
  const Api& api = Driver();
  const std::vector<std::uint64_t> image = FakeFatbin();
  CUmodule module = nullptr;
  REQUIRE(api.cuModuleLoadData(&module, image.data()) == CUDA_SUCCESS);
  CUfunction racy = nullptr;
  REQUIRE(api.cuModuleGetFunction(&racy, module, kRacySum) == CUDA_SUCCESS);

  constexpr int kN = 1 << 18;
  constexpr int kBins = 4;
  std::vector<float> values(kN);
  std::uint32_t state = 12345;
  for (float& v : values) {  // magnitudes from 2^-20 to 2^20, both signs
    state = state * 1664525u + 1013904223u;
    v = std::ldexp(1.0f + static_cast<float>(state >> 9) / (1 << 23),
                   static_cast<int>(state % 41) - 20) *
        ((state & 0x100) ? -1.0f : 1.0f);
  }
  DeviceBuffer in(kN * 4), sums(kBins * 4);
  REQUIRE(api.cuMemcpyHtoD(in.address, values.data(), kN * 4) == CUDA_SUCCESS);
  int n = kN, bins = kBins;
  void* params[] = {&in.address, &sums.address, &n, &bins};
  std::set<std::vector<std::uint32_t>> outcomes;
  for (int run = 0; run < 5; ++run) {
    REQUIRE(api.cuMemsetD32(sums.address, 0, kBins) == CUDA_SUCCESS);
    REQUIRE(api.cuLaunchKernel(racy, 64, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr) ==
            CUDA_SUCCESS);
    std::vector<std::uint32_t> bits(kBins);
    REQUIRE(api.cuMemcpyDtoH(bits.data(), sums.address, kBins * 4) == CUDA_SUCCESS);
    outcomes.insert(bits);
  }
  INFO("distinct results in 5 runs: " << outcomes.size());
  CHECK(outcomes.size() >= 2);
  CHECK(api.cuModuleUnload(module) == CUDA_SUCCESS);
}

TEST_CASE("cuGetErrorName and cuGetErrorString describe driver errors", "[standin]") {
  const Api& api = Driver();
  const char* text = nullptr;
  CHECK(api.cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &text) == CUDA_SUCCESS);
  CHECK(std::string(text) == "CUDA_ERROR_NOT_SUPPORTED");
  CHECK(api.cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text) == CUDA_SUCCESS);
  CHECK(std::string(text) == "invalid argument");
  CHECK(api.cuGetErrorName(CUDA_ERROR_STUB_LIBRARY, &text) == CUDA_SUCCESS);
  CHECK(std::string(text) == "CUDA_ERROR_STUB_LIBRARY");
  CHECK(api.cuGetErrorName(static_cast<CUresult>(123456), &text) == CUDA_ERROR_INVALID_VALUE);
  CHECK(text == nullptr);
}

}  // namespace
