// The stand-in libcudart.so.13: the part of the CUDA runtime API the test programs use, plus the
// registration and launch glue that nvcc-generated host code calls.
//
// It reaches the driver only the way the real runtime does: on first use it dlopen()s
// "libcuda.so.1", dlsym()s "cuGetProcAddress_v2" (and the stand-in's ndt_standin_runtime_call,
// through which it tells the stand-in CUPTI when a call that starts work enters and returns, as
// the real runtime tells CUPTI), and asks cuGetProcAddress_v2
// for every driver function it needs, by base name with cudaVersion 13000. Stream-ordered
// functions are fetched twice, with CU_GET_PROC_ADDRESS_LEGACY_STREAM and with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM; the runtime's _ptds/_ptsz entry points (what
// nvcc --default-stream per-thread compiles to) use the second set. So a driver-level hook sees
// every runtime operation, as on a real GPU.
//
// Kernels: __cudaRegisterFunction maps each host stub to (fat binary, mangled device name).
// __cudaGetKernel (called once per <<<>>> site by CUDA 13 code) loads the fat binary with
// cuLibraryLoadData on first use and returns cuLibraryGetKernel's CUkernel as the
// cudaKernel_t; __cudaLaunchKernel and cudaLaunchKernel launch it with cuLaunchKernel.
//
// Not modelled: several devices, sticky errors, graphs, pinned or managed memory, textures.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "standin_immortal.h"

// The glue nvcc-generated code calls (crt/host_runtime.h, crt/device_functions.h). Those headers
// only compile under nvcc, so the prototypes are repeated here.
extern "C" {
void** __cudaRegisterFatBinary(void* fatCubin);
void __cudaRegisterFatBinaryEnd(void** fatCubinHandle);
void __cudaUnregisterFatBinary(void** fatCubinHandle);
void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun,
                            const char* deviceName, int thread_limit, uint3* tid, uint3* bid,
                            dim3* bDim, dim3* gDim, int* wSize);
void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress,
                       const char* deviceName, int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char* deviceAddress,
                              const char* deviceName, int ext, size_t size, int constant,
                              int global);
char __cudaInitModule(void** fatCubinHandle);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream);
}

namespace ndt::standin {
namespace {

// The driver functions the runtime uses outside streams, each from cuGetProcAddress_v2.
struct DriverApi {
  PFN_cuInit_v2000 cuInit = nullptr;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName = nullptr;
  PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxReset_v11000 cuDevicePrimaryCtxReset = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuMemcpyPeer_v4000 cuMemcpyPeer = nullptr;  // on the legacy stream, as cudaMemcpyPeer*
  PFN_cuMemcpyPeerAsync_v4000 cuMemcpyPeerAsync = nullptr;
  PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute = nullptr;
  PFN_cuDeviceCanAccessPeer_v4000 cuDeviceCanAccessPeer = nullptr;
  PFN_cuCtxEnablePeerAccess_v4000 cuCtxEnablePeerAccess = nullptr;
  PFN_cuCtxSynchronize_v13000 cuCtxSynchronize = nullptr;  // CUDA 13: takes the context
  PFN_cuMemAlloc_v3020 cuMemAlloc = nullptr;
  PFN_cuMemAllocPitch_v3020 cuMemAllocPitch = nullptr;
  PFN_cuMemAllocManaged_v6000 cuMemAllocManaged = nullptr;
  PFN_cuMemGetAddressRange_v3020 cuMemGetAddressRange = nullptr;
  PFN_cuMemFree_v3020 cuMemFree = nullptr;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo = nullptr;
  PFN_cuMemHostAlloc_v2020 cuMemHostAlloc = nullptr;
  PFN_cuMemFreeHost_v2000 cuMemFreeHost = nullptr;
  PFN_cuMemHostGetDevicePointer_v3020 cuMemHostGetDevicePointer = nullptr;
  PFN_cuMemHostGetFlags_v2030 cuMemHostGetFlags = nullptr;
  PFN_cuMemHostRegister_v6050 cuMemHostRegister = nullptr;
  PFN_cuMemHostUnregister_v4000 cuMemHostUnregister = nullptr;
  PFN_cuStreamCreateWithPriority_v5050 cuStreamCreateWithPriority = nullptr;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy = nullptr;
  PFN_cuEventCreate_v2000 cuEventCreate = nullptr;
  PFN_cuEventSynchronize_v2000 cuEventSynchronize = nullptr;
  PFN_cuEventQuery_v2000 cuEventQuery = nullptr;
  PFN_cuEventElapsedTime_v12080 cuEventElapsedTime = nullptr;
  PFN_cuEventDestroy_v4000 cuEventDestroy = nullptr;
  PFN_cuLibraryLoadData_v12000 cuLibraryLoadData = nullptr;
  PFN_cuLibraryUnload_v12000 cuLibraryUnload = nullptr;
  PFN_cuLibraryGetKernel_v12000 cuLibraryGetKernel = nullptr;
  PFN_cuCtxGetStreamPriorityRange_v5050 cuCtxGetStreamPriorityRange = nullptr;
  PFN_cuDeviceGetDefaultMemPool_v11020 cuDeviceGetDefaultMemPool = nullptr;
  PFN_cuMemPoolCreate_v11020 cuMemPoolCreate = nullptr;
  PFN_cuMemPoolDestroy_v11020 cuMemPoolDestroy = nullptr;
  PFN_cuMemPoolSetAttribute_v11020 cuMemPoolSetAttribute = nullptr;
  PFN_cuMemPoolGetAttribute_v11020 cuMemPoolGetAttribute = nullptr;
  PFN_cuMemPoolTrimTo_v11020 cuMemPoolTrimTo = nullptr;
  PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags = nullptr;
  PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy = nullptr;
  PFN_cuGraphDestroy_v10000 cuGraphDestroy = nullptr;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 cuThreadExchangeStreamCaptureMode = nullptr;
};

// The stream-ordered driver functions, in one of their two default-stream flavours (the
// per-thread variants have the same prototypes as the legacy ones).
struct StreamApi {
  PFN_cuMemcpy_v4000 cuMemcpy = nullptr;
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD = nullptr;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH = nullptr;
  PFN_cuMemcpyDtoD_v3020 cuMemcpyDtoD = nullptr;
  PFN_cuMemcpyAsync_v4000 cuMemcpyAsync = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync = nullptr;
  PFN_cuMemcpyDtoDAsync_v3020 cuMemcpyDtoDAsync = nullptr;
  PFN_cuMemsetD8_v3020 cuMemsetD8 = nullptr;
  PFN_cuMemsetD8Async_v3020 cuMemsetD8Async = nullptr;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize = nullptr;
  PFN_cuStreamQuery_v2000 cuStreamQuery = nullptr;
  PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent = nullptr;
  PFN_cuEventRecord_v2000 cuEventRecord = nullptr;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel = nullptr;
  PFN_cuMemAllocAsync_v11020 cuMemAllocAsync = nullptr;
  PFN_cuMemFreeAsync_v11020 cuMemFreeAsync = nullptr;
  PFN_cuMemAllocFromPoolAsync_v11020 cuMemAllocFromPoolAsync = nullptr;
  PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture = nullptr;
  PFN_cuStreamEndCapture_v10000 cuStreamEndCapture = nullptr;
  PFN_cuGraphLaunch_v10000 cuGraphLaunch = nullptr;
  PFN_cuStreamIsCapturing_v10000 cuStreamIsCapturing = nullptr;
  PFN_cuStreamGetFlags_v5050 cuStreamGetFlags = nullptr;
  PFN_cuStreamGetPriority_v5050 cuStreamGetPriority = nullptr;
  PFN_cuStreamGetId_v12000 cuStreamGetId = nullptr;
  PFN_cuLaunchHostFunc_v10000 cuLaunchHostFunc = nullptr;
  PFN_cuEventRecordWithFlags_v11010 cuEventRecordWithFlags = nullptr;
  PFN_cuStreamGetCaptureInfo_v12030 cuStreamGetCaptureInfo = nullptr;
  PFN_cuMemcpy2DUnaligned_v3020 cuMemcpy2DUnaligned = nullptr;
  PFN_cuMemcpy2DAsync_v3020 cuMemcpy2DAsync = nullptr;
};

enum DefaultStream { kLegacyStream = 0, kPerThreadStream = 1 };

struct FatbinRecord {
  void* fatbin;  // first member: the handle nvcc code holds is a pointer to it
  CUlibrary library = nullptr;
};

struct HostFunctionRecord {
  FatbinRecord* fatbin = nullptr;
  std::string device_name;
  CUkernel kernel = nullptr;
  int max_dynamic_shared = 48 * 1024;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  int carveout = -1;                   // cudaFuncAttributePreferredSharedMemoryCarveout
};

struct CallConfiguration {
  dim3 grid;
  dim3 block;
  size_t shared_mem;
  cudaStream_t stream;
};

// All runtime state; every member is guarded by `mu`.
struct Runtime {
  std::mutex mu;
  bool init_attempted = false;
  cudaError_t init_status = cudaErrorInitializationError;
  bool driver_loaded = false;
  PFN_cuGetProcAddress_v12000 get_proc_address = nullptr;
  void (*runtime_call)(int entering) = nullptr;  // the stand-in driver's, for CUPTI
  DriverApi api;
  StreamApi stream_api[2];
  CUcontext primaries[8] = {};  // each device's, retained once the runtime first needs it
  std::vector<std::unique_ptr<FatbinRecord>> fatbins;
  std::unordered_map<const void*, HostFunctionRecord> host_functions;
  // What cudaDeviceSetLimit, cudaSetDeviceFlags and cudaDeviceSetCacheConfig set (the stand-in
  // runs no device code, so they change nothing but what the getters say).
  size_t limits[7] = {1024, 1 << 20, 8 << 20, 2, 2048, 32, 0};  // cudaLimit order
  unsigned device_flags = 0;
  cudaFuncCache cache_config = cudaFuncCachePreferNone;
};

Runtime& GetRuntime() {
  static Immortal<Runtime> runtime;
  return *runtime;
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;
thread_local bool t_context_bound = false;
thread_local std::vector<CallConfiguration> t_call_configurations;

// Error names come from driver_types.h (standin_cuda_errors.inc); descriptions are the
// runtime's for the common errors and the name for the rest.
struct ErrorText {
  cudaError_t error;
  const char* text;
};

constexpr ErrorText kErrorNames[] = {
#define NDT_CUDA_ERROR(name) {name, #name},
#include "standin_cuda_errors.inc"
#undef NDT_CUDA_ERROR
};

constexpr ErrorText kErrorDescriptions[] = {
    {cudaSuccess, "no error"},
    {cudaErrorInvalidValue, "invalid argument"},
    {cudaErrorMemoryAllocation, "out of memory"},
    {cudaErrorInitializationError, "initialization error"},
    {cudaErrorCudartUnloading, "driver shutting down"},
    {cudaErrorInvalidConfiguration, "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorMissingConfiguration, "__global__ function call is not configured"},
    {cudaErrorNoDevice, "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "invalid device ordinal"},
    {cudaErrorInvalidKernelImage, "device kernel image is invalid"},
    {cudaErrorDeviceUninitialized, "invalid device context"},
    {cudaErrorInvalidDeviceFunction, "invalid device function"},
    {cudaErrorInvalidResourceHandle, "invalid resource handle"},
    {cudaErrorSymbolNotFound, "named symbol not found"},
    {cudaErrorNotReady, "device not ready"},
    {cudaErrorIllegalAddress, "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "unspecified launch failure"},
    {cudaErrorNotPermitted, "operation not permitted"},
    {cudaErrorNotSupported, "operation not supported"},
    {cudaErrorUnknown, "unknown error"},
};

constexpr char kUnrecognized[] = "unrecognized error code";

const char* ErrorName(cudaError_t error) {
  for (const ErrorText& entry : kErrorNames) {
    if (entry.error == error) return entry.text;
  }
  return nullptr;
}

// The runtime error for a driver error. The CUDA runtime numbers most driver errors the same way
// (CUDA_ERROR_INVALID_VALUE = cudaErrorInvalidValue = 1, ..._ILLEGAL_ADDRESS = 700); values the
// runtime has no name for become cudaErrorUnknown.
cudaError_t FromDriver(CUresult result) {
  const auto error = static_cast<cudaError_t>(result);
  return ErrorName(error) != nullptr ? error : cudaErrorUnknown;
}

// Records a failure for cudaGetLastError/cudaPeekAtLastError and passes it through.
cudaError_t Report(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}

cudaError_t ReportDriver(CUresult result) {
  return Report(FromDriver(result));
}

template <typename Pfn>
bool Resolve(Runtime& rt, const char* name, cuuint64_t flags, Pfn* out) {
  void* address = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult result = rt.get_proc_address(name, &address, CUDART_VERSION, flags, &status);
  if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || address == nullptr) {
    return false;
  }
  *out = reinterpret_cast<Pfn>(address);
  return true;
}

bool ResolveStreamApi(Runtime& rt, cuuint64_t flags, StreamApi* s) {
  return Resolve(rt, "cuMemcpy", flags, &s->cuMemcpy) &&
         Resolve(rt, "cuMemcpyHtoD", flags, &s->cuMemcpyHtoD) &&
         Resolve(rt, "cuMemcpyDtoH", flags, &s->cuMemcpyDtoH) &&
         Resolve(rt, "cuMemcpyDtoD", flags, &s->cuMemcpyDtoD) &&
         Resolve(rt, "cuMemcpyAsync", flags, &s->cuMemcpyAsync) &&
         Resolve(rt, "cuMemcpyHtoDAsync", flags, &s->cuMemcpyHtoDAsync) &&
         Resolve(rt, "cuMemcpyDtoHAsync", flags, &s->cuMemcpyDtoHAsync) &&
         Resolve(rt, "cuMemcpyDtoDAsync", flags, &s->cuMemcpyDtoDAsync) &&
         Resolve(rt, "cuMemsetD8", flags, &s->cuMemsetD8) &&
         Resolve(rt, "cuMemsetD8Async", flags, &s->cuMemsetD8Async) &&
         Resolve(rt, "cuStreamSynchronize", flags, &s->cuStreamSynchronize) &&
         Resolve(rt, "cuStreamQuery", flags, &s->cuStreamQuery) &&
         Resolve(rt, "cuStreamWaitEvent", flags, &s->cuStreamWaitEvent) &&
         Resolve(rt, "cuEventRecord", flags, &s->cuEventRecord) &&
         Resolve(rt, "cuLaunchKernel", flags, &s->cuLaunchKernel) &&
         Resolve(rt, "cuMemAllocAsync", flags, &s->cuMemAllocAsync) &&
         Resolve(rt, "cuMemFreeAsync", flags, &s->cuMemFreeAsync) &&
         Resolve(rt, "cuMemAllocFromPoolAsync", flags, &s->cuMemAllocFromPoolAsync) &&
         Resolve(rt, "cuStreamBeginCapture", flags, &s->cuStreamBeginCapture) &&
         Resolve(rt, "cuStreamEndCapture", flags, &s->cuStreamEndCapture) &&
         Resolve(rt, "cuGraphLaunch", flags, &s->cuGraphLaunch) &&
         Resolve(rt, "cuStreamIsCapturing", flags, &s->cuStreamIsCapturing) &&
         Resolve(rt, "cuStreamGetFlags", flags, &s->cuStreamGetFlags) &&
         Resolve(rt, "cuStreamGetPriority", flags, &s->cuStreamGetPriority) &&
         Resolve(rt, "cuStreamGetId", flags, &s->cuStreamGetId) &&
         Resolve(rt, "cuLaunchHostFunc", flags, &s->cuLaunchHostFunc) &&
         Resolve(rt, "cuEventRecordWithFlags", flags, &s->cuEventRecordWithFlags) &&
         Resolve(rt, "cuStreamGetCaptureInfo", flags, &s->cuStreamGetCaptureInfo) &&
         Resolve(rt, "cuMemcpy2DUnaligned", flags, &s->cuMemcpy2DUnaligned) &&
         Resolve(rt, "cuMemcpy2DAsync", flags, &s->cuMemcpy2DAsync);
}

bool ResolveDriverApi(Runtime& rt) {
  constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
  DriverApi& a = rt.api;
  return Resolve(rt, "cuInit", kDefault, &a.cuInit) &&
         Resolve(rt, "cuDriverGetVersion", kDefault, &a.cuDriverGetVersion) &&
         Resolve(rt, "cuDeviceGetCount", kDefault, &a.cuDeviceGetCount) &&
         Resolve(rt, "cuDeviceGet", kDefault, &a.cuDeviceGet) &&
         Resolve(rt, "cuDeviceGetName", kDefault, &a.cuDeviceGetName) &&
         Resolve(rt, "cuDeviceGetUuid", kDefault, &a.cuDeviceGetUuid) &&
         Resolve(rt, "cuDeviceGetAttribute", kDefault, &a.cuDeviceGetAttribute) &&
         Resolve(rt, "cuDeviceTotalMem", kDefault, &a.cuDeviceTotalMem) &&
         Resolve(rt, "cuDevicePrimaryCtxRetain", kDefault, &a.cuDevicePrimaryCtxRetain) &&
         Resolve(rt, "cuDevicePrimaryCtxReset", kDefault, &a.cuDevicePrimaryCtxReset) &&
         Resolve(rt, "cuCtxGetCurrent", kDefault, &a.cuCtxGetCurrent) &&
         Resolve(rt, "cuCtxSetCurrent", kDefault, &a.cuCtxSetCurrent) &&
         Resolve(rt, "cuCtxGetDevice", kDefault, &a.cuCtxGetDevice) &&
         Resolve(rt, "cuMemcpyPeer", kDefault, &a.cuMemcpyPeer) &&
         Resolve(rt, "cuMemcpyPeerAsync", kDefault, &a.cuMemcpyPeerAsync) &&
         Resolve(rt, "cuPointerGetAttribute", kDefault, &a.cuPointerGetAttribute) &&
         Resolve(rt, "cuDeviceCanAccessPeer", kDefault, &a.cuDeviceCanAccessPeer) &&
         Resolve(rt, "cuCtxEnablePeerAccess", kDefault, &a.cuCtxEnablePeerAccess) &&
         Resolve(rt, "cuCtxSynchronize", kDefault, &a.cuCtxSynchronize) &&
         Resolve(rt, "cuMemAlloc", kDefault, &a.cuMemAlloc) &&
         Resolve(rt, "cuMemAllocPitch", kDefault, &a.cuMemAllocPitch) &&
         Resolve(rt, "cuMemAllocManaged", kDefault, &a.cuMemAllocManaged) &&
         Resolve(rt, "cuMemGetAddressRange", kDefault, &a.cuMemGetAddressRange) &&
         Resolve(rt, "cuMemFree", kDefault, &a.cuMemFree) &&
         Resolve(rt, "cuMemGetInfo", kDefault, &a.cuMemGetInfo) &&
         Resolve(rt, "cuMemHostAlloc", kDefault, &a.cuMemHostAlloc) &&
         Resolve(rt, "cuMemFreeHost", kDefault, &a.cuMemFreeHost) &&
         Resolve(rt, "cuMemHostGetDevicePointer", kDefault, &a.cuMemHostGetDevicePointer) &&
         Resolve(rt, "cuMemHostGetFlags", kDefault, &a.cuMemHostGetFlags) &&
         Resolve(rt, "cuMemHostRegister", kDefault, &a.cuMemHostRegister) &&
         Resolve(rt, "cuMemHostUnregister", kDefault, &a.cuMemHostUnregister) &&
         Resolve(rt, "cuStreamCreateWithPriority", kDefault, &a.cuStreamCreateWithPriority) &&
         Resolve(rt, "cuStreamDestroy", kDefault, &a.cuStreamDestroy) &&
         Resolve(rt, "cuEventCreate", kDefault, &a.cuEventCreate) &&
         Resolve(rt, "cuEventSynchronize", kDefault, &a.cuEventSynchronize) &&
         Resolve(rt, "cuEventQuery", kDefault, &a.cuEventQuery) &&
         Resolve(rt, "cuEventElapsedTime", kDefault, &a.cuEventElapsedTime) &&
         Resolve(rt, "cuEventDestroy", kDefault, &a.cuEventDestroy) &&
         Resolve(rt, "cuLibraryLoadData", kDefault, &a.cuLibraryLoadData) &&
         Resolve(rt, "cuLibraryUnload", kDefault, &a.cuLibraryUnload) &&
         Resolve(rt, "cuLibraryGetKernel", kDefault, &a.cuLibraryGetKernel) &&
         Resolve(rt, "cuCtxGetStreamPriorityRange", kDefault, &a.cuCtxGetStreamPriorityRange) &&
         Resolve(rt, "cuDeviceGetDefaultMemPool", kDefault, &a.cuDeviceGetDefaultMemPool) &&
         Resolve(rt, "cuMemPoolCreate", kDefault, &a.cuMemPoolCreate) &&
         Resolve(rt, "cuMemPoolDestroy", kDefault, &a.cuMemPoolDestroy) &&
         Resolve(rt, "cuMemPoolSetAttribute", kDefault, &a.cuMemPoolSetAttribute) &&
         Resolve(rt, "cuMemPoolGetAttribute", kDefault, &a.cuMemPoolGetAttribute) &&
         Resolve(rt, "cuMemPoolTrimTo", kDefault, &a.cuMemPoolTrimTo) &&
         Resolve(rt, "cuGraphInstantiateWithFlags", kDefault, &a.cuGraphInstantiateWithFlags) &&
         Resolve(rt, "cuGraphExecDestroy", kDefault, &a.cuGraphExecDestroy) &&
         Resolve(rt, "cuGraphDestroy", kDefault, &a.cuGraphDestroy) &&
         ResolveStreamApi(rt, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &rt.stream_api[kLegacyStream]) &&
         ResolveStreamApi(rt, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                          &rt.stream_api[kPerThreadStream]) &&
         Resolve(rt, "cuThreadExchangeStreamCaptureMode", kDefault,
                 &a.cuThreadExchangeStreamCaptureMode);
}

cudaError_t InitializeLocked(Runtime& rt) {
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace, as with the real runtime.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return cudaErrorInsufficientDriver;
  rt.get_proc_address =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (rt.get_proc_address == nullptr || !ResolveDriverApi(rt)) return cudaErrorInsufficientDriver;
  rt.runtime_call = reinterpret_cast<void (*)(int)>(dlsym(driver, "ndt_standin_runtime_call"));
  rt.driver_loaded = true;
  if (const CUresult r = rt.api.cuInit(0); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : FromDriver(r);
  }
  int driver_version = 0;
  if (rt.api.cuDriverGetVersion(&driver_version) != CUDA_SUCCESS ||
      driver_version < CUDART_VERSION) {
    return cudaErrorInsufficientDriver;
  }
  return cudaSuccess;
}

// Loads the driver and initializes it, once per process; later calls return the first result.
cudaError_t EnsureInitialized() {
  Runtime& rt = GetRuntime();
  std::lock_guard lock(rt.mu);
  if (!rt.init_attempted) {
    rt.init_attempted = true;
    rt.init_status = InitializeLocked(rt);
  }
  return rt.init_status;
}

// The primary context of device `ordinal`, retained once per process (after EnsureInitialized).
cudaError_t PrimaryContext(int ordinal, CUcontext* primary) {
  Runtime& rt = GetRuntime();
  std::lock_guard lock(rt.mu);
  if (ordinal < 0 || ordinal >= static_cast<int>(std::size(rt.primaries))) {
    return cudaErrorInvalidDevice;
  }
  if (rt.primaries[ordinal] == nullptr) {
    CUdevice device;
    if (const CUresult r = rt.api.cuDeviceGet(&device, ordinal); r != CUDA_SUCCESS) {
      return FromDriver(r);
    }
    if (const CUresult r = rt.api.cuDevicePrimaryCtxRetain(&rt.primaries[ordinal], device);
        r != CUDA_SUCCESS) {
      return FromDriver(r);
    }
  }
  *primary = rt.primaries[ordinal];
  return cudaSuccess;
}

// Makes the primary context of the thread's device (cudaSetDevice's; 0 before) current on the
// calling thread when it has none, as the runtime does on the first call that needs a context.
cudaError_t EnsureContext() {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return e;
  if (t_context_bound) return cudaSuccess;
  Runtime& rt = GetRuntime();
  CUcontext primary;
  if (const cudaError_t e = PrimaryContext(t_device, &primary); e != cudaSuccess) return e;
  CUcontext current = nullptr;
  if (const CUresult r = rt.api.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) {
    return FromDriver(r);
  }
  if (current == nullptr) {
    if (const CUresult r = rt.api.cuCtxSetCurrent(primary); r != CUDA_SUCCESS) {
      return FromDriver(r);
    }
  }
  t_context_bound = true;
  return cudaSuccess;
}

const DriverApi& Api() {
  return GetRuntime().api;
}

const StreamApi& Streams(DefaultStream flavour) {
  return GetRuntime().stream_api[flavour];
}

CUstream ToDriver(cudaStream_t stream) {
  return reinterpret_cast<CUstream>(stream);
}

CUdeviceptr ToDevicePtr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

// A runtime call, from its entry to its return, as CUPTI sees it: the work it starts carries its
// correlation id (standin_activity.h). Made after EnsureContext. On every call that starts work,
// and on a few that start none but come first on a program's threads (cudaSetDevice,
// cudaMalloc, cudaStreamCreate*): their API records carry no op of ndtrace's.
class RuntimeCall {
 public:
  RuntimeCall() : notify_(GetRuntime().runtime_call) {
    if (notify_ != nullptr) notify_(1);
  }
  ~RuntimeCall() {
    if (notify_ != nullptr) notify_(0);
  }
  RuntimeCall(const RuntimeCall&) = delete;
  RuntimeCall& operator=(const RuntimeCall&) = delete;

 private:
  void (*notify_)(int);
};

cudaError_t Memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                   cudaStream_t stream, bool async, DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const RuntimeCall call;
  const StreamApi& s = Streams(flavour);
  const CUstream cu_stream = ToDriver(stream);
  CUresult r;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      r = async ? s.cuMemcpyHtoDAsync(ToDevicePtr(dst), src, count, cu_stream)
                : s.cuMemcpyHtoD(ToDevicePtr(dst), src, count);
      break;
    case cudaMemcpyDeviceToHost:
      r = async ? s.cuMemcpyDtoHAsync(dst, ToDevicePtr(src), count, cu_stream)
                : s.cuMemcpyDtoH(dst, ToDevicePtr(src), count);
      break;
    case cudaMemcpyDeviceToDevice:
      r = async ? s.cuMemcpyDtoDAsync(ToDevicePtr(dst), ToDevicePtr(src), count, cu_stream)
                : s.cuMemcpyDtoD(ToDevicePtr(dst), ToDevicePtr(src), count);
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      r = async ? s.cuMemcpyAsync(ToDevicePtr(dst), ToDevicePtr(src), count, cu_stream)
                : s.cuMemcpy(ToDevicePtr(dst), ToDevicePtr(src), count);
      break;
    default:
      return Report(cudaErrorInvalidMemcpyDirection);
  }
  return ReportDriver(r);
}

// cudaMemcpy2D(Async): the driver's 2D copy, each side's memory type from the kind.
cudaError_t Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                     size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                     DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const RuntimeCall call;
  CUmemorytype src_type, dst_type;
  switch (kind) {
    case cudaMemcpyHostToHost:
      src_type = dst_type = CU_MEMORYTYPE_HOST;
      break;
    case cudaMemcpyHostToDevice:
      src_type = CU_MEMORYTYPE_HOST, dst_type = CU_MEMORYTYPE_DEVICE;
      break;
    case cudaMemcpyDeviceToHost:
      src_type = CU_MEMORYTYPE_DEVICE, dst_type = CU_MEMORYTYPE_HOST;
      break;
    case cudaMemcpyDeviceToDevice:
      src_type = dst_type = CU_MEMORYTYPE_DEVICE;
      break;
    case cudaMemcpyDefault:
      src_type = dst_type = CU_MEMORYTYPE_UNIFIED;
      break;
    default:
      return Report(cudaErrorInvalidMemcpyDirection);
  }
  if (height > 1 && (dpitch < width || spitch < width)) return Report(cudaErrorInvalidPitchValue);
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = src_type;
  copy.srcHost = src;
  copy.srcDevice = ToDevicePtr(src);
  copy.srcPitch = spitch;
  copy.dstMemoryType = dst_type;
  copy.dstHost = dst;
  copy.dstDevice = ToDevicePtr(dst);
  copy.dstPitch = dpitch;
  copy.WidthInBytes = width;
  copy.Height = height;
  const StreamApi& s = Streams(flavour);
  return ReportDriver(async ? s.cuMemcpy2DAsync(&copy, ToDriver(stream))
                            : s.cuMemcpy2DUnaligned(&copy));
}

cudaError_t CheckDevice(int device);

// cudaMemcpyPeer(Async): between the primary contexts of the two devices.
cudaError_t MemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count,
                       cudaStream_t stream, bool async) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const RuntimeCall call;
  if (count == 0) return cudaSuccess;
  CUcontext dst_context;
  CUcontext src_context;
  if (const cudaError_t e = CheckDevice(dst_device); e != cudaSuccess) return Report(e);
  if (const cudaError_t e = CheckDevice(src_device); e != cudaSuccess) return Report(e);
  if (const cudaError_t e = PrimaryContext(dst_device, &dst_context); e != cudaSuccess) {
    return Report(e);
  }
  if (const cudaError_t e = PrimaryContext(src_device, &src_context); e != cudaSuccess) {
    return Report(e);
  }
  const DriverApi& s = Api();
  return ReportDriver(
      async ? s.cuMemcpyPeerAsync(ToDevicePtr(dst), dst_context, ToDevicePtr(src), src_context,
                                  count, ToDriver(stream))
            : s.cuMemcpyPeer(ToDevicePtr(dst), dst_context, ToDevicePtr(src), src_context, count));
}

cudaError_t Memset(void* dst, int value, size_t count, cudaStream_t stream, bool async,
                   DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const RuntimeCall call;
  const StreamApi& s = Streams(flavour);
  const auto byte = static_cast<unsigned char>(value);
  return ReportDriver(async ? s.cuMemsetD8Async(ToDevicePtr(dst), byte, count, ToDriver(stream))
                            : s.cuMemsetD8(ToDevicePtr(dst), byte, count));
}

cudaError_t StreamSynchronize(cudaStream_t stream, DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Streams(flavour).cuStreamSynchronize(ToDriver(stream)));
}

cudaError_t StreamQuery(cudaStream_t stream, DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const CUresult r = Streams(flavour).cuStreamQuery(ToDriver(stream));
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : ReportDriver(r);
}

cudaError_t StreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags,
                            DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Streams(flavour).cuStreamWaitEvent(ToDriver(stream),
                                                         reinterpret_cast<CUevent>(event), flags));
}

cudaError_t EventRecord(cudaEvent_t event, cudaStream_t stream, DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(
      Streams(flavour).cuEventRecord(reinterpret_cast<CUevent>(event), ToDriver(stream)));
}

// The CUkernel for a registered host stub: loads its fat binary as a library on first use.
cudaError_t KernelForHostFunction(const void* host_function, CUkernel* out) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return e;
  Runtime& rt = GetRuntime();
  std::lock_guard lock(rt.mu);
  const auto it = rt.host_functions.find(host_function);
  if (it == rt.host_functions.end()) return cudaErrorInvalidDeviceFunction;
  HostFunctionRecord& record = it->second;
  if (record.kernel == nullptr) {
    FatbinRecord& fatbin = *record.fatbin;
    if (fatbin.library == nullptr) {
      const CUresult r = rt.api.cuLibraryLoadData(&fatbin.library, fatbin.fatbin, nullptr, nullptr,
                                                  0, nullptr, nullptr, 0);
      if (r != CUDA_SUCCESS) return FromDriver(r);
    }
    const CUresult r =
        rt.api.cuLibraryGetKernel(&record.kernel, fatbin.library, record.device_name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) return cudaErrorInvalidDeviceFunction;
    if (r != CUDA_SUCCESS) return FromDriver(r);
  }
  *out = record.kernel;
  return cudaSuccess;
}

cudaError_t LaunchKernel(CUkernel kernel, dim3 grid, dim3 block, void** args, size_t shared_mem,
                         cudaStream_t stream, DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const RuntimeCall call;
  if (kernel == nullptr) return Report(cudaErrorInvalidDeviceFunction);
  if (shared_mem > UINT_MAX) return Report(cudaErrorInvalidValue);
  const CUresult r = Streams(flavour).cuLaunchKernel(
      reinterpret_cast<CUfunction>(kernel), grid.x, grid.y, grid.z, block.x, block.y, block.z,
      static_cast<unsigned>(shared_mem), ToDriver(stream), args, nullptr);
  // A launch the driver rejects for its geometry is a configuration error to the runtime.
  return Report(r == CUDA_ERROR_INVALID_VALUE ? cudaErrorInvalidConfiguration : FromDriver(r));
}

cudaError_t LaunchHostFunction(const void* func, dim3 grid, dim3 block, void** args,
                               size_t shared_mem, cudaStream_t stream, DefaultStream flavour) {
  CUkernel kernel = nullptr;
  if (const cudaError_t e = KernelForHostFunction(func, &kernel); e != cudaSuccess) {
    return Report(e);
  }
  return LaunchKernel(kernel, grid, block, args, shared_mem, stream, flavour);
}

cudaError_t GetDriverEntryPoint(const char* symbol, void** func, unsigned version,
                                unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  if (symbol == nullptr || func == nullptr) return Report(cudaErrorInvalidValue);
  CUdriverProcAddressQueryResult driver_status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  // cudaEnable* flags and cudaDriverEntryPoint* results have the driver's values.
  const CUresult r =
      GetRuntime().get_proc_address(symbol, func, static_cast<int>(version), flags, &driver_status);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(driver_status);
  if (r == CUDA_ERROR_NOT_FOUND) return cudaSuccess;  // reported through *status, as documented
  return ReportDriver(r);
}

void FillProperties(const DriverApi& api, CUdevice device, cudaDeviceProp* p) {
  const auto attr = [&](CUdevice_attribute attribute) {
    int value = 0;
    api.cuDeviceGetAttribute(&value, attribute, device);
    return value;
  };
  std::memset(p, 0, sizeof(*p));
  api.cuDeviceGetName(p->name, sizeof(p->name), device);
  CUuuid uuid;
  if (api.cuDeviceGetUuid(&uuid, device) == CUDA_SUCCESS) {
    std::memcpy(&p->uuid, &uuid, sizeof(uuid));
  }
  api.cuDeviceTotalMem(&p->totalGlobalMem, device);
  p->sharedMemPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  p->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  p->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p->memPitch = attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  p->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  p->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  p->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  p->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  p->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  p->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  p->totalConstMem = attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  p->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p->textureAlignment = attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  p->texturePitchAlignment = attr(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT);
  p->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  p->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  p->surfaceAlignment = attr(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT);
  p->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  p->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  p->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  p->pciDeviceID = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  p->pciDomainID = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  p->tccDriver = attr(CU_DEVICE_ATTRIBUTE_TCC_DRIVER);
  p->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  p->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  p->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  p->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p->persistingL2CacheMaxSize = attr(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE);
  p->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  p->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  p->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED);
  p->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED);
  p->sharedMemPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  p->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  p->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  p->isMultiGpuBoard = attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
  p->computePreemptionSupported = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED);
  p->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  p->sharedMemPerBlockOptin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  p->accessPolicyMaxWindowSize = attr(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE);
  p->reservedSharedMemPerBlock = attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
  p->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  p->clusterLaunch = attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
}

cudaError_t CheckDevice(int device) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return e;
  int count = 0;
  if (const CUresult r = Api().cuDeviceGetCount(&count); r != CUDA_SUCCESS) return FromDriver(r);
  return device >= 0 && device < count ? cudaSuccess : cudaErrorInvalidDevice;
}

// Runs `body` on the registration of `host_function` (a kernel's host stub), under the lock;
// cudaErrorInvalidDeviceFunction when no kernel has that stub.
template <typename Body>
cudaError_t WithHostFunction(const void* host_function, Body body) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return e;
  Runtime& rt = GetRuntime();
  std::lock_guard lock(rt.mu);
  const auto it = rt.host_functions.find(host_function);
  if (it == rt.host_functions.end()) return cudaErrorInvalidDeviceFunction;
  return body(it->second);
}

// Blocks of `block_size` threads, each with `dynamic_shared` bytes of dynamic shared memory, that
// fit on one multiprocessor of the stand-in device (an H200's limits: 2,048 threads, 32 blocks,
// 228 KiB of shared memory with 1 KiB reserved per block; 32 registers a thread never limit it).
int BlocksPerMultiprocessor(int block_size, size_t dynamic_shared) {
  constexpr int kThreads = 2048;
  constexpr int kBlocks = 32;
  constexpr size_t kShared = 233472;
  constexpr size_t kReservedPerBlock = 1024;
  const int warps = (block_size + 31) / 32;
  int blocks = std::min(kBlocks, kThreads / (warps * 32));
  blocks = std::min<int>(blocks, static_cast<int>(kShared / (dynamic_shared + kReservedPerBlock)));
  return blocks;
}

// cudaStreamAddCallback's callback, run by cuLaunchHostFunc.
struct StreamCallback {
  cudaStreamCallback_t callback;
  cudaStream_t stream;
  void* user_data;
};

void RunStreamCallback(void* data) {
  const StreamCallback* c = static_cast<StreamCallback*>(data);
  c->callback(c->stream, cudaSuccess, c->user_data);
  delete c;
}

cudaError_t StreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status,
                              DefaultStream flavour) {
  if (status == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUstreamCaptureStatus driver_status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = Streams(flavour).cuStreamIsCapturing(ToDriver(stream), &driver_status);
  if (r == CUDA_SUCCESS) *status = static_cast<cudaStreamCaptureStatus>(driver_status);
  return ReportDriver(r);
}

cudaError_t StreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status_out,
                                 unsigned long long* id_out, cudaGraph_t* graph_out,
                                 const cudaGraphNode_t** dependencies_out,
                                 const cudaGraphEdgeData** edge_data_out,
                                 size_t* num_dependencies_out, DefaultStream flavour) {
  if (status_out == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  const CUresult r = Streams(flavour).cuStreamGetCaptureInfo(
      ToDriver(stream), &status, &id, reinterpret_cast<CUgraph*>(graph_out),
      reinterpret_cast<const CUgraphNode**>(dependencies_out),
      reinterpret_cast<const CUgraphEdgeData**>(edge_data_out), num_dependencies_out);
  if (r == CUDA_SUCCESS) {
    *status_out = static_cast<cudaStreamCaptureStatus>(status);
    if (id_out != nullptr) *id_out = id;
  }
  return ReportDriver(r);
}

template <typename Value, typename Get>
cudaError_t StreamQueryValue(cudaStream_t stream, Value* value, Get get) {
  if (value == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(get(ToDriver(stream), value));
}

cudaError_t StreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* user_data,
                              unsigned flags, DefaultStream flavour) {
  if (callback == nullptr || flags != 0) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  auto* c = new (std::nothrow) StreamCallback{callback, stream, user_data};
  if (c == nullptr) return Report(cudaErrorMemoryAllocation);
  const CUresult r = Streams(flavour).cuLaunchHostFunc(ToDriver(stream), RunStreamCallback, c);
  if (r != CUDA_SUCCESS) delete c;
  return ReportDriver(r);
}

}  // namespace

int RuntimeCallNotSupported() {
  return Report(cudaErrorNotSupported);
}

}  // namespace ndt::standin

using ndt::standin::Api;
using ndt::standin::EnsureContext;
using ndt::standin::EnsureInitialized;
using ndt::standin::kLegacyStream;
using ndt::standin::kPerThreadStream;
using ndt::standin::Report;
using ndt::standin::ReportDriver;
using ndt::standin::Streams;
using ndt::standin::ToDriver;

extern "C" {

// --- Versions and errors -----------------------------------------------------------------------

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return Report(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

// 0 (and success) when there is no driver, as documented.
cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return Report(cudaErrorInvalidValue);
  *driverVersion = 0;
  EnsureInitialized();
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  bool loaded;
  {
    std::lock_guard lock(rt.mu);
    loaded = rt.driver_loaded;
  }
  if (!loaded) return cudaSuccess;
  return ReportDriver(Api().cuDriverGetVersion(driverVersion));
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t error = ndt::standin::t_last_error;
  ndt::standin::t_last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError(void) {
  return ndt::standin::t_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  const char* name = ndt::standin::ErrorName(error);
  return name != nullptr ? name : ndt::standin::kUnrecognized;
}

const char* cudaGetErrorString(cudaError_t error) {
  for (const auto& entry : ndt::standin::kErrorDescriptions) {
    if (entry.error == error) return entry.text;
  }
  return cudaGetErrorName(error);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return ndt::standin::GetDriverEntryPoint(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  return ndt::standin::GetDriverEntryPoint(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

// --- Devices -----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Report(cudaErrorInvalidValue);
  *count = 0;
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuDeviceGetCount(count));
}

// Since CUDA 12 this also makes the device's primary context current.
cudaError_t cudaSetDevice(int device) {
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  ndt::standin::t_device = device;
  CUcontext primary;
  if (const cudaError_t e = ndt::standin::PrimaryContext(device, &primary); e != cudaSuccess) {
    return Report(e);
  }
  if (const CUresult r = Api().cuCtxSetCurrent(primary); r != CUDA_SUCCESS) {
    return ReportDriver(r);
  }
  ndt::standin::t_context_bound = true;
  const ndt::standin::RuntimeCall call;
  return cudaSuccess;
}

// The device of the calling thread's current context, else the one cudaSetDevice chose.
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  CUcontext current = nullptr;
  CUdevice of_context;
  if (Api().cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr &&
      Api().cuCtxGetDevice(&of_context) == CUDA_SUCCESS) {
    *device = of_context;
  } else {
    *device = ndt::standin::t_device;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  if (const cudaError_t e = ndt::standin::CheckDevice(peerDevice); e != cudaSuccess) {
    return Report(e);
  }
  return ReportDriver(Api().cuDeviceCanAccessPeer(canAccessPeer, device, peerDevice));
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (const cudaError_t e = ndt::standin::CheckDevice(peerDevice); e != cudaSuccess) {
    return Report(e);
  }
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUcontext peer;
  if (const cudaError_t e = ndt::standin::PrimaryContext(peerDevice, &peer); e != cudaSuccess) {
    return Report(e);
  }
  return ReportDriver(Api().cuCtxEnablePeerAccess(peer, flags));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  CUdevice cu_device;
  if (const CUresult r = Api().cuDeviceGet(&cu_device, device); r != CUDA_SUCCESS) {
    return ReportDriver(r);
  }
  ndt::standin::FillProperties(Api(), cu_device, prop);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  CUdevice cu_device;
  if (const CUresult r = Api().cuDeviceGet(&cu_device, device); r != CUDA_SUCCESS) {
    return ReportDriver(r);
  }
  // cudaDevAttr* and CU_DEVICE_ATTRIBUTE_* share their values.
  return ReportDriver(
      Api().cuDeviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), cu_device));
}

cudaError_t cudaDeviceSynchronize(void) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuCtxSynchronize(nullptr));
}

// Frees everything the device's primary context holds. Registered kernels stay usable: their
// libraries are context-independent.
cudaError_t cudaDeviceReset(void) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  CUdevice device;
  if (const CUresult r = Api().cuDeviceGet(&device, ndt::standin::t_device); r != CUDA_SUCCESS) {
    return ReportDriver(r);
  }
  return ReportDriver(Api().cuDevicePrimaryCtxReset(device));
}

// Limits, flags and cache preferences: kept, and said back (no device code runs here).
cudaError_t cudaDeviceGetLimit(size_t* pValue, cudaLimit limit) {
  if (pValue == nullptr) return Report(cudaErrorInvalidValue);
  if (static_cast<unsigned>(limit) >= 7) return Report(cudaErrorUnsupportedLimit);
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  *pValue = rt.limits[limit];
  return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  if (static_cast<unsigned>(limit) >= 7) return Report(cudaErrorUnsupportedLimit);
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  rt.limits[limit] = value;
  return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  constexpr unsigned kKnown =
      cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax | cudaDeviceSyncMemops;
  if ((flags & ~kKnown) != 0 || (flags & cudaDeviceScheduleMask) == 3) {
    return Report(cudaErrorInvalidValue);
  }
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  rt.device_flags = flags;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  *flags = rt.device_flags | cudaDeviceMapHost;  // mapping host memory is always on
  return cudaSuccess;
}

cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache cacheConfig) {
  if (static_cast<unsigned>(cacheConfig) > cudaFuncCachePreferEqual) {
    return Report(cudaErrorInvalidValue);
  }
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  rt.cache_config = cacheConfig;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* pCacheConfig) {
  if (pCacheConfig == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  *pCacheConfig = rt.cache_config;
  return cudaSuccess;
}

// Device N is on PCI bus N + 1 ("0000:01:00.0" for device 0).
cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (pciBusId == nullptr || len <= 0) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  if (device == nullptr || pciBusId == nullptr) return Report(cudaErrorInvalidValue);
  unsigned domain = 0, bus = 0, slot = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &slot) != 3 || domain != 0 || bus == 0) {
    return Report(cudaErrorInvalidValue);
  }
  if (const cudaError_t e = ndt::standin::CheckDevice(static_cast<int>(bus) - 1);
      e != cudaSuccess) {
    return Report(cudaErrorInvalidDevice);
  }
  *device = static_cast<int>(bus) - 1;
  return cudaSuccess;
}

cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  if (device == nullptr || prop == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = ndt::standin::CheckDevice(0); e != cudaSuccess) return Report(e);
  *device = 0;  // every stand-in device is alike
  return cudaSuccess;
}

cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  if (flags != 0) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  if (deviceFlags != 0) {
    if (const cudaError_t e = cudaSetDeviceFlags(deviceFlags); e != cudaSuccess) return e;
  }
  CUcontext context = nullptr;
  return Report(ndt::standin::PrimaryContext(device, &context));
}

// Nsight's capture range: nothing to start or stop here.
cudaError_t cudaProfilerStart(void) {
  return Report(ndt::standin::EnsureInitialized());
}

cudaError_t cudaProfilerStop(void) {
  return Report(ndt::standin::EnsureInitialized());
}

// --- Memory ------------------------------------------------------------------------------------

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  return ndt::standin::Memcpy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false,
                                kLegacyStream);
}

cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind) {
  return ndt::standin::Memcpy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false,
                                kPerThreadStream);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return ndt::standin::Memcpy2D(dst, dpitch, src, spitch, width, height, kind, stream, true,
                                kLegacyStream);
}

cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  return ndt::standin::Memcpy2D(dst, dpitch, src, spitch, width, height, kind, stream, true,
                                kPerThreadStream);
}

cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (devPtr == nullptr || pitch == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  CUdeviceptr allocated = 0;
  // The driver's element size 16 keeps every row aligned as the runtime's rows are.
  const CUresult r = Api().cuMemAllocPitch(&allocated, pitch, width, height, 16);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(allocated);
  return ReportDriver(r);
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;
  CUdeviceptr address = 0;
  const CUresult r = Api().cuMemAlloc(&address, size);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(address);
  return ReportDriver(r);
}

// Unified memory, as CUDA's introductory examples use it: memory the host and the device both
// reach at the same address (cuMemAllocManaged; here host memory, as all device memory is).
cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (devPtr == nullptr || size == 0 ||
      (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)) {
    return Report(cudaErrorInvalidValue);
  }
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  CUdeviceptr address = 0;
  const CUresult r = Api().cuMemAllocManaged(&address, size, flags);
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(address);
  return ReportDriver(r);
}

namespace {

// Hints about where managed memory should live: they change where the pages are, never their
// values, and there is one memory here. The range must be memory CUDA knows.
cudaError_t CheckManagedHint(const void* devPtr, size_t count) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (devPtr == nullptr || count == 0 ||
      Api().cuMemGetAddressRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(devPtr)) !=
          CUDA_SUCCESS ||
      reinterpret_cast<CUdeviceptr>(devPtr) - base + count > bytes) {
    return Report(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, cudaMemLocation, unsigned int,
                                 cudaStream_t) {
  return CheckManagedHint(devPtr, count);
}

cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count, cudaMemLocation,
                                      unsigned int, cudaStream_t) {
  return CheckManagedHint(devPtr, count);
}

cudaError_t cudaMemAdvise(const void* devPtr, size_t count, cudaMemoryAdvise, cudaMemLocation) {
  return CheckManagedHint(devPtr, count);
}

cudaError_t cudaFree(void* devPtr) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  if (devPtr == nullptr) return cudaSuccess;
  return ReportDriver(Api().cuMemFree(ndt::standin::ToDevicePtr(devPtr)));
}

// Pinned host memory, through the driver as cudart does it: cudaHostAlloc and cudaMallocHost are
// cuMemHostAlloc (cudaHostAlloc* flags are CU_MEMHOSTALLOC_* values), cudaHostRegister is
// cuMemHostRegister_v2 (cudaHostRegister* = CU_MEMHOSTREGISTER_*).
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (pHost == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  *pHost = nullptr;
  if (size == 0) return cudaSuccess;
  return ReportDriver(Api().cuMemHostAlloc(pHost, size, flags));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  if (ptr == nullptr) return cudaSuccess;
  return ReportDriver(Api().cuMemFreeHost(ptr));
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemHostRegister(ptr, size, flags));
}

cudaError_t cudaHostUnregister(void* ptr) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemHostUnregister(ptr));
}

// What tensor.is_pinned() and a tensor's device checks ask. Memory CUDA does not know is
// cudaMemoryTypeUnregistered (CUDA 11 and later), not an error.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  *attributes = cudaPointerAttributes{};
  attributes->device = -2;
  const auto address = reinterpret_cast<CUdeviceptr>(ptr);
  unsigned int type = 0;
  if (Api().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address) !=
      CUDA_SUCCESS) {
    attributes->type = cudaMemoryTypeUnregistered;
    return cudaSuccess;
  }
  int ordinal = 0;
  if (const CUresult r =
          Api().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
      r != CUDA_SUCCESS) {
    return ReportDriver(r);
  }
  attributes->type = type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  attributes->device = ordinal;
  attributes->devicePointer = const_cast<void*>(ptr);  // unified addressing: the same address
  attributes->hostPointer = type == CU_MEMORYTYPE_HOST ? const_cast<void*>(ptr) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (pDevice == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUdeviceptr device = 0;
  const CUresult r = Api().cuMemHostGetDevicePointer(&device, pHost, flags);
  if (r == CUDA_SUCCESS) *pDevice = reinterpret_cast<void*>(device);
  return ReportDriver(r);
}

cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemHostGetFlags(pFlags, pHost));
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemGetInfo(free, total));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return ndt::standin::Memcpy(dst, src, count, kind, nullptr, false, kLegacyStream);
}

cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return ndt::standin::Memcpy(dst, src, count, kind, nullptr, false, kPerThreadStream);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return ndt::standin::Memcpy(dst, src, count, kind, stream, true, kLegacyStream);
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return ndt::standin::Memcpy(dst, src, count, kind, stream, true, kPerThreadStream);
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  return ndt::standin::MemcpyPeer(dst, dstDevice, src, srcDevice, count, nullptr, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                size_t count, cudaStream_t stream) {
  return ndt::standin::MemcpyPeer(dst, dstDevice, src, srcDevice, count, stream, true);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return ndt::standin::Memset(devPtr, value, count, nullptr, false, kLegacyStream);
}

cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return ndt::standin::Memset(devPtr, value, count, nullptr, false, kPerThreadStream);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return ndt::standin::Memset(devPtr, value, count, stream, true, kLegacyStream);
}

cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return ndt::standin::Memset(devPtr, value, count, stream, true, kPerThreadStream);
}

// --- Streams -----------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (pStream == nullptr || (flags & ~unsigned{cudaStreamNonBlocking}) != 0) {
    return Report(cudaErrorInvalidValue);
  }
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  CUstream stream = nullptr;  // cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING
  const CUresult r = Api().cuStreamCreateWithPriority(&stream, flags, priority);
  if (r == CUDA_SUCCESS) *pStream = reinterpret_cast<cudaStream_t>(stream);
  return ReportDriver(r);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuCtxGetStreamPriorityRange(leastPriority, greatestPriority));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuStreamDestroy(ndt::standin::ToDriver(stream)));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return ndt::standin::StreamSynchronize(stream, kLegacyStream);
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return ndt::standin::StreamSynchronize(stream, kPerThreadStream);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return ndt::standin::StreamQuery(stream, kLegacyStream);
}

cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  return ndt::standin::StreamQuery(stream, kPerThreadStream);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return ndt::standin::StreamWaitEvent(stream, event, flags, kLegacyStream);
}

cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return ndt::standin::StreamWaitEvent(stream, event, flags, kPerThreadStream);
}

// Stream queries and host callbacks: the driver's, on the runtime's default-stream flavour.
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return ndt::standin::StreamIsCapturing(stream, pCaptureStatus, kLegacyStream);
}

cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                       cudaStreamCaptureStatus* pCaptureStatus) {
  return ndt::standin::StreamIsCapturing(stream, pCaptureStatus, kPerThreadStream);
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  return ndt::standin::StreamQueryValue(hStream, flags, Streams(kLegacyStream).cuStreamGetFlags);
}

cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int* flags) {
  return ndt::standin::StreamQueryValue(hStream, flags, Streams(kPerThreadStream).cuStreamGetFlags);
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  return ndt::standin::StreamQueryValue(hStream, priority,
                                        Streams(kLegacyStream).cuStreamGetPriority);
}

cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int* priority) {
  return ndt::standin::StreamQueryValue(hStream, priority,
                                        Streams(kPerThreadStream).cuStreamGetPriority);
}

cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  return ndt::standin::StreamQueryValue(hStream, streamId, Streams(kLegacyStream).cuStreamGetId);
}

cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long* streamId) {
  return ndt::standin::StreamQueryValue(hStream, streamId, Streams(kPerThreadStream).cuStreamGetId);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  return ReportDriver(Streams(kLegacyStream).cuLaunchHostFunc(ToDriver(stream), fn, userData));
}

cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  return ReportDriver(Streams(kPerThreadStream).cuLaunchHostFunc(ToDriver(stream), fn, userData));
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void* userData, unsigned int flags) {
  return ndt::standin::StreamAddCallback(stream, callback, userData, flags, kLegacyStream);
}

cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                       void* userData, unsigned int flags) {
  return ndt::standin::StreamAddCallback(stream, callback, userData, flags, kPerThreadStream);
}

// --- Events ------------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUevent created = nullptr;  // cudaEvent* flags == CU_EVENT_* flags
  const CUresult r = Api().cuEventCreate(&created, flags);
  if (r == CUDA_SUCCESS) *event = reinterpret_cast<cudaEvent_t>(created);
  return ReportDriver(r);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return ndt::standin::EventRecord(event, stream, kLegacyStream);
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return ndt::standin::EventRecord(event, stream, kPerThreadStream);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(
      Streams(kLegacyStream)
          .cuEventRecordWithFlags(reinterpret_cast<CUevent>(event), ToDriver(stream), flags));
}

cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                          unsigned int flags) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(
      Streams(kPerThreadStream)
          .cuEventRecordWithFlags(reinterpret_cast<CUevent>(event), ToDriver(stream), flags));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuEventSynchronize(reinterpret_cast<CUevent>(event)));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const CUresult r = Api().cuEventQuery(reinterpret_cast<CUevent>(event));
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : ReportDriver(r);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuEventElapsedTime(ms, reinterpret_cast<CUevent>(start),
                                               reinterpret_cast<CUevent>(end)));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuEventDestroy(reinterpret_cast<CUevent>(event)));
}

// Implemented because its stub could not be: it returns a struct.
cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}

// --- Stream-ordered allocation and memory pools --------------------------------------------------

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  if (const cudaError_t e = ndt::standin::CheckDevice(device); e != cudaSuccess) return Report(e);
  CUmemoryPool pool = nullptr;
  const CUresult r = Api().cuDeviceGetDefaultMemPool(&pool, device);
  if (r == CUDA_SUCCESS && memPool != nullptr) *memPool = reinterpret_cast<cudaMemPool_t>(pool);
  return ReportDriver(r);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* poolProps) {
  if (memPool == nullptr || poolProps == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  // cudaMemPoolProps and CUmemPoolProps have the same layout and values.
  CUmemoryPool pool = nullptr;
  const CUresult r =
      Api().cuMemPoolCreate(&pool, reinterpret_cast<const CUmemPoolProps*>(poolProps));
  if (r == CUDA_SUCCESS) *memPool = reinterpret_cast<cudaMemPool_t>(pool);
  return ReportDriver(r);
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(memPool)));
}

// cudaMemPoolAttr and CUmemPool_attribute have the same values.
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemPoolSetAttribute(reinterpret_cast<CUmemoryPool>(memPool),
                                                  static_cast<CUmemPool_attribute>(attr), value));
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(memPool),
                                                  static_cast<CUmemPool_attribute>(attr), value));
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  return ReportDriver(
      Api().cuMemPoolTrimTo(reinterpret_cast<CUmemoryPool>(memPool), minBytesToKeep));
}

namespace {

cudaError_t MallocAsync(void** devPtr, size_t size, cudaMemPool_t pool, cudaStream_t stream,
                        ndt::standin::DefaultStream flavour) {
  if (devPtr == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::StreamApi& s = ndt::standin::Streams(flavour);
  CUdeviceptr address = 0;
  const CUresult r =
      pool == nullptr
          ? s.cuMemAllocAsync(&address, size, ndt::standin::ToDriver(stream))
          : s.cuMemAllocFromPoolAsync(&address, size, reinterpret_cast<CUmemoryPool>(pool),
                                      ndt::standin::ToDriver(stream));
  if (r == CUDA_SUCCESS) *devPtr = reinterpret_cast<void*>(address);
  return ReportDriver(r);
}

cudaError_t FreeAsync(void* devPtr, cudaStream_t stream, ndt::standin::DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(ndt::standin::Streams(flavour).cuMemFreeAsync(
      ndt::standin::ToDevicePtr(devPtr), ndt::standin::ToDriver(stream)));
}

cudaError_t BeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode, ndt::standin::DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(ndt::standin::Streams(flavour).cuStreamBeginCapture(
      ndt::standin::ToDriver(stream), static_cast<CUstreamCaptureMode>(mode)));
}

cudaError_t EndCapture(cudaStream_t stream, cudaGraph_t* graph, ndt::standin::DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUgraph out = nullptr;
  const CUresult r =
      ndt::standin::Streams(flavour).cuStreamEndCapture(ndt::standin::ToDriver(stream), &out);
  if (r == CUDA_SUCCESS && graph != nullptr) *graph = reinterpret_cast<cudaGraph_t>(out);
  return ReportDriver(r);
}

cudaError_t GraphLaunch(cudaGraphExec_t exec, cudaStream_t stream, ndt::standin::DefaultStream flavour) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  const ndt::standin::RuntimeCall call;
  return ReportDriver(ndt::standin::Streams(flavour).cuGraphLaunch(
      reinterpret_cast<CUgraphExec>(exec), ndt::standin::ToDriver(stream)));
}

}  // namespace

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync(devPtr, size, nullptr, hStream, kLegacyStream);
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync(devPtr, size, nullptr, hStream, kPerThreadStream);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream) {
  if (memPool == nullptr) return Report(cudaErrorInvalidValue);
  return MallocAsync(ptr, size, memPool, stream, kLegacyStream);
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream) {
  if (memPool == nullptr) return Report(cudaErrorInvalidValue);
  return MallocAsync(ptr, size, memPool, stream, kPerThreadStream);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return FreeAsync(devPtr, hStream, kLegacyStream);
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return FreeAsync(devPtr, hStream, kPerThreadStream);
}

// --- Graphs (stream capture) --------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return BeginCapture(stream, mode, kLegacyStream);
}

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return BeginCapture(stream, mode, kPerThreadStream);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  return EndCapture(stream, pGraph, kLegacyStream);
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* pGraph) {
  return EndCapture(stream, pGraph, kPerThreadStream);
}

// What PyTorch's caching allocator and CUDA graphs ask of a capture: its status, id and graph.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  return ndt::standin::StreamGetCaptureInfo(stream, captureStatus_out, id_out, graph_out,
                                            dependencies_out, edgeData_out, numDependencies_out,
                                            kLegacyStream);
}

cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                          cudaStreamCaptureStatus* captureStatus_out,
                                          unsigned long long* id_out, cudaGraph_t* graph_out,
                                          const cudaGraphNode_t** dependencies_out,
                                          const cudaGraphEdgeData** edgeData_out,
                                          size_t* numDependencies_out) {
  return ndt::standin::StreamGetCaptureInfo(stream, captureStatus_out, id_out, graph_out,
                                            dependencies_out, edgeData_out, numDependencies_out,
                                            kPerThreadStream);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (const cudaError_t e = EnsureInitialized(); e != cudaSuccess) return Report(e);
  // cudaStreamCaptureMode* and CUstreamCaptureMode share their values.
  return ReportDriver(
      Api().cuThreadExchangeStreamCaptureMode(reinterpret_cast<CUstreamCaptureMode*>(mode)));
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  if (pGraphExec == nullptr) return Report(cudaErrorInvalidValue);
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  CUgraphExec exec = nullptr;
  const CUresult r =
      Api().cuGraphInstantiateWithFlags(&exec, reinterpret_cast<CUgraph>(graph), flags);
  if (r == CUDA_SUCCESS) *pGraphExec = reinterpret_cast<cudaGraphExec_t>(exec);
  return ReportDriver(r);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return GraphLaunch(graphExec, stream, kLegacyStream);
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return GraphLaunch(graphExec, stream, kPerThreadStream);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(graphExec)));
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (const cudaError_t e = EnsureContext(); e != cudaSuccess) return Report(e);
  return ReportDriver(Api().cuGraphDestroy(reinterpret_cast<CUgraph>(graph)));
}

// --- Launch ------------------------------------------------------------------------------------

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) {
  return ndt::standin::LaunchHostFunction(func, gridDim, blockDim, args, sharedMem, stream,
                                          kLegacyStream);
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                  size_t sharedMem, cudaStream_t stream) {
  return ndt::standin::LaunchHostFunction(func, gridDim, blockDim, args, sharedMem, stream,
                                          kPerThreadStream);
}

// A kernel's attributes, and what occupancy calculators ask: the stand-in device's limits (an
// H200's), 32 registers a thread, no static shared, constant or local memory.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return Report(cudaErrorInvalidValue);
  return Report(ndt::standin::WithHostFunction(func, [&](ndt::standin::HostFunctionRecord& f) {
    *attr = cudaFuncAttributes{};
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = f.max_dynamic_shared;
    attr->preferredShmemCarveout = f.carveout;
    return cudaSuccess;
  }));
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  return Report(ndt::standin::WithHostFunction(func, [&](ndt::standin::HostFunctionRecord& f) {
    switch (attr) {
      case cudaFuncAttributeMaxDynamicSharedMemorySize:
        if (value < 0 || value > 232448) return cudaErrorInvalidValue;  // the opt-in maximum
        f.max_dynamic_shared = value;
        return cudaSuccess;
      case cudaFuncAttributePreferredSharedMemoryCarveout:
        if (value < -1 || value > 100) return cudaErrorInvalidValue;
        f.carveout = value;
        return cudaSuccess;
      default:  // cluster shapes and scheduling: accepted, nothing to change
        return attr >= 0 && attr < cudaFuncAttributeMax ? cudaSuccess : cudaErrorInvalidValue;
    }
  }));
}

cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache cacheConfig) {
  if (static_cast<unsigned>(cacheConfig) > cudaFuncCachePreferEqual) {
    return Report(cudaErrorInvalidValue);
  }
  return Report(ndt::standin::WithHostFunction(
      func, [](ndt::standin::HostFunctionRecord&) { return cudaSuccess; }));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize,
                                                                   unsigned int flags) {
  if (numBlocks == nullptr || blockSize <= 0 || blockSize > 1024 ||
      (flags & ~unsigned{cudaOccupancyDisableCachingOverride}) != 0) {
    return Report(cudaErrorInvalidValue);
  }
  return Report(ndt::standin::WithHostFunction(func, [&](ndt::standin::HostFunctionRecord& f) {
    *numBlocks = dynamicSMemSize > static_cast<size_t>(f.max_dynamic_shared)
                     ? 0
                     : ndt::standin::BlocksPerMultiprocessor(blockSize, dynamicSMemSize);
    return cudaSuccess;
  }));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func,
                                                          int blockSize, size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      numBlocks, func, blockSize, dynamicSMemSize, cudaOccupancyDefault);
}

cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func,
                                                      int numBlocks, int blockSize) {
  if (dynamicSmemSize == nullptr || numBlocks <= 0 || blockSize <= 0 || blockSize > 1024 ||
      ndt::standin::BlocksPerMultiprocessor(blockSize, 0) < numBlocks) {
    return Report(cudaErrorInvalidValue);
  }
  return Report(ndt::standin::WithHostFunction(func, [&](ndt::standin::HostFunctionRecord& f) {
    const size_t per_block = 233472 / static_cast<size_t>(numBlocks) - 1024;
    *dynamicSmemSize = std::min(per_block, static_cast<size_t>(f.max_dynamic_shared));
    return cudaSuccess;
  }));
}

// --- The glue nvcc-generated host code calls ---------------------------------------------------

void** __cudaRegisterFatBinary(void* fatCubin) {
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  auto record = std::make_unique<ndt::standin::FatbinRecord>();
  record->fatbin = fatCubin;
  void** handle = &record->fatbin;
  rt.fatbins.push_back(std::move(record));
  return handle;
}

void __cudaRegisterFatBinaryEnd(void**) {}

void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  auto* record = reinterpret_cast<ndt::standin::FatbinRecord*>(fatCubinHandle);
  std::erase_if(rt.host_functions,
                [record](const auto& entry) { return entry.second.fatbin == record; });
  if (record->library != nullptr && rt.api.cuLibraryUnload != nullptr) {
    rt.api.cuLibraryUnload(record->library);
  }
  std::erase_if(rt.fatbins, [record](const auto& owned) { return owned.get() == record; });
}

void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char*,
                            const char* deviceName, int, uint3*, uint3*, dim3*, dim3*, int*) {
  ndt::standin::Runtime& rt = ndt::standin::GetRuntime();
  std::lock_guard lock(rt.mu);
  ndt::standin::HostFunctionRecord record;
  record.fatbin = reinterpret_cast<ndt::standin::FatbinRecord*>(fatCubinHandle);
  record.device_name = deviceName;
  rt.host_functions[hostFun] = std::move(record);
}

// Device variables are not modelled: the test programs have none.
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}

void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}

char __cudaInitModule(void**) {
  return 1;
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) {
  ndt::standin::t_call_configurations.push_back(
      {gridDim, blockDim, sharedMem, reinterpret_cast<cudaStream_t>(stream)});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  auto& stack = ndt::standin::t_call_configurations;
  if (stack.empty()) return Report(cudaErrorMissingConfiguration);
  const ndt::standin::CallConfiguration config = stack.back();
  stack.pop_back();
  *gridDim = config.grid;
  *blockDim = config.block;
  *sharedMem = config.shared_mem;
  *static_cast<cudaStream_t*>(stream) = config.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  if (kernel == nullptr) return Report(cudaErrorInvalidValue);
  CUkernel found = nullptr;
  const cudaError_t e = ndt::standin::KernelForHostFunction(hostFun, &found);
  *kernel = found;
  return Report(e);
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) {
  return ndt::standin::LaunchKernel(kernel, gridDim, blockDim, args, sharedMem, stream,
                                    kLegacyStream);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream) {
  return ndt::standin::LaunchKernel(kernel, gridDim, blockDim, args, sharedMem, stream,
                                    kPerThreadStream);
}

}  // extern "C"
