// Tests of the stand-in libcudart.so.13 on its own: it is dlopen()ed by path, and it finds the
// stand-in libcuda.so.1 itself through LD_LIBRARY_PATH (set by CTest), as a program would.
// What nvcc-built programs do with it is tested by tests/programs/.
#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

// nvcc-generated code calls this; no includable header declares it.
extern "C" cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                                  void* stream);

namespace {

void* Runtime() {
  static void* handle = dlopen(NDT_STANDIN_LIBCUDART, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  return handle;
}

// The stand-in's definition of runtime function `name`, typed like the real one.
template <typename Fn>
Fn* Get(const char* name) {
  auto* fn = reinterpret_cast<Fn*>(dlsym(Runtime(), name));
  INFO(name);
  REQUIRE(fn != nullptr);
  return fn;
}

#define NDT_RUNTIME(name) Get<decltype(name)>(#name)

TEST_CASE("every function of the real runtime is exported", "[standin]") {
  const char* const kNames[] = {
#define NDT_RUNTIME_ENTRY_POINT(name) #name,
#include "standin_runtime_entry_points.inc"
#undef NDT_RUNTIME_ENTRY_POINT
  };
  CHECK(std::size(kNames) > 400);
  for (const char* name : kNames) {
    INFO(name);
    CHECK(dlsym(Runtime(), name) != nullptr);
  }
}

TEST_CASE("unimplemented runtime functions fail with cudaErrorNotSupported", "[standin]") {
  cudaPitchedPtr pitched{};
  CHECK(NDT_RUNTIME(cudaMalloc3D)(&pitched, cudaExtent{64, 4, 2}) == cudaErrorNotSupported);
  CHECK(NDT_RUNTIME(cudaPeekAtLastError)() == cudaErrorNotSupported);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorNotSupported);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaSuccess);
  cudaGraph_t graph = nullptr;
  CHECK(NDT_RUNTIME(cudaGraphCreate)(&graph, 0) == cudaErrorNotSupported);
  const cudaChannelFormatDesc desc =
      NDT_RUNTIME(cudaCreateChannelDesc)(32, 0, 0, 0, cudaChannelFormatKindFloat);
  CHECK(desc.x == 32);
  CHECK(desc.f == cudaChannelFormatKindFloat);
}

TEST_CASE("the runtime describes the stand-in device from driver attributes", "[standin]") {
  int count = 0;
  REQUIRE(NDT_RUNTIME(cudaGetDeviceCount)(&count) == cudaSuccess);
  CHECK(count == 1);
  cudaDeviceProp prop;
  REQUIRE(NDT_RUNTIME(cudaGetDeviceProperties)(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name) == "ndtrace stand-in device");
  CHECK(prop.major == 9);
  CHECK(prop.minor == 0);
  CHECK(prop.multiProcessorCount == 4);
  CHECK(prop.warpSize == 32);
  CHECK(prop.maxThreadsPerBlock == 1024);
  CHECK(prop.totalGlobalMem > 0);
  int value = 0;
  CHECK(NDT_RUNTIME(cudaDeviceGetAttribute)(&value, cudaDevAttrMultiProcessorCount, 0) ==
        cudaSuccess);
  CHECK(value == 4);
  CHECK(NDT_RUNTIME(cudaGetDeviceProperties)(&prop, 1) == cudaErrorInvalidDevice);
  CHECK(NDT_RUNTIME(cudaSetDevice)(1) == cudaErrorInvalidDevice);
  int version = 0;
  CHECK(NDT_RUNTIME(cudaRuntimeGetVersion)(&version) == cudaSuccess);
  CHECK(version == 13000);
  CHECK(NDT_RUNTIME(cudaDriverGetVersion)(&version) == cudaSuccess);
  CHECK(version == 13000);
}

TEST_CASE("cudaGetDriverEntryPointByVersion hands out the driver's own variants", "[standin]") {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  REQUIRE(NDT_RUNTIME(cudaGetDriverEntryPointByVersion)("cuMemAlloc", &fn, 13000, cudaEnableDefault,
                                                        &status) == cudaSuccess);
  CHECK(status == cudaDriverEntryPointSuccess);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(driver != nullptr);  // loaded by the runtime, found through LD_LIBRARY_PATH
  CHECK(fn == dlsym(driver, "cuMemAlloc_v2"));
  CHECK(NDT_RUNTIME(cudaGetDriverEntryPointByVersion)("cuLaunchKernel", &fn, 13000,
                                                      cudaEnablePerThreadDefaultStream,
                                                      &status) == cudaSuccess);
  CHECK(fn == dlsym(driver, "cuLaunchKernel_ptsz"));
  CHECK(NDT_RUNTIME(cudaGetDriverEntryPointByVersion)("cuNoSuchFunction", &fn, 13000,
                                                      cudaEnableDefault, &status) == cudaSuccess);
  CHECK(status == cudaDriverEntryPointSymbolNotFound);
  dlclose(driver);
}

TEST_CASE("runtime memory calls check their arguments", "[standin]") {
  void* p = &p;
  CHECK(NDT_RUNTIME(cudaMalloc)(&p, 0) == cudaSuccess);
  CHECK(p == nullptr);
  CHECK(NDT_RUNTIME(cudaFree)(nullptr) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaMalloc)(&p, 256) == cudaSuccess);
  char host[256] = {};
  CHECK(NDT_RUNTIME(cudaMemcpy)(p, host, 256, static_cast<cudaMemcpyKind>(7)) ==
        cudaErrorInvalidMemcpyDirection);
  CHECK(NDT_RUNTIME(cudaMemcpy)(p, host, 512, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaMemset)(p, 7, 256) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpy)(host, p, 256, cudaMemcpyDefault) == cudaSuccess);
  CHECK(host[255] == 7);
  CHECK(NDT_RUNTIME(cudaFree)(p) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFree)(p) == cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorInvalidValue);
}

TEST_CASE("launching an unregistered function is an invalid device function", "[standin]") {
  int not_a_kernel = 0;
  CHECK(NDT_RUNTIME(cudaLaunchKernel)(&not_a_kernel, dim3(1), dim3(1), nullptr, 0, nullptr) ==
        cudaErrorInvalidDeviceFunction);
  dim3 grid, block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
  CHECK(NDT_RUNTIME(__cudaPopCallConfiguration)(&grid, &block, &shared, &stream) ==
        cudaErrorMissingConfiguration);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorMissingConfiguration);
}

TEST_CASE(
    "what samples and frameworks ask the runtime besides launching: limits, flags, "
    "stream queries, host callbacks, kernel attributes",
    "[standin]") {
  size_t value = 0;
  REQUIRE(NDT_RUNTIME(cudaDeviceGetLimit)(&value, cudaLimitStackSize) == cudaSuccess);
  CHECK(value == 1024);
  CHECK(NDT_RUNTIME(cudaDeviceSetLimit)(cudaLimitMallocHeapSize, size_t{64} << 20) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaDeviceGetLimit)(&value, cudaLimitMallocHeapSize) == cudaSuccess);
  CHECK(value == size_t{64} << 20);
  CHECK(NDT_RUNTIME(cudaDeviceGetLimit)(&value, static_cast<cudaLimit>(99)) ==
        cudaErrorUnsupportedLimit);
  CHECK(NDT_RUNTIME(cudaSetDeviceFlags)(cudaDeviceScheduleBlockingSync) == cudaSuccess);
  unsigned flags = 0;
  CHECK(NDT_RUNTIME(cudaGetDeviceFlags)(&flags) == cudaSuccess);
  CHECK(flags == (cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
  CHECK(NDT_RUNTIME(cudaSetDeviceFlags)(0x1000) == cudaErrorInvalidValue);
  char bus[32] = {};
  CHECK(NDT_RUNTIME(cudaDeviceGetPCIBusId)(bus, sizeof bus, 0) == cudaSuccess);
  int device = -1;
  CHECK(NDT_RUNTIME(cudaDeviceGetByPCIBusId)(&device, bus) == cudaSuccess);
  CHECK(device == 0);
  CHECK(NDT_RUNTIME(cudaDeviceGetByPCIBusId)(&device, "0000:63:00.0") == cudaErrorInvalidDevice);
  CHECK(NDT_RUNTIME(cudaProfilerStart)() == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaProfilerStop)() == cudaSuccess);

  int least = 0, greatest = 0;
  REQUIRE(NDT_RUNTIME(cudaDeviceGetStreamPriorityRange)(&least, &greatest) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(NDT_RUNTIME(cudaStreamCreateWithPriority)(&stream, cudaStreamNonBlocking, greatest) ==
          cudaSuccess);
  int priority = 0;
  CHECK(NDT_RUNTIME(cudaStreamGetPriority)(stream, &priority) == cudaSuccess);
  CHECK(priority == greatest);
  CHECK(NDT_RUNTIME(cudaStreamGetFlags)(stream, &flags) == cudaSuccess);
  CHECK(flags == cudaStreamNonBlocking);
  unsigned long long id = 0, other_id = 0;
  CHECK(NDT_RUNTIME(cudaStreamGetId)(stream, &id) == cudaSuccess);
  CHECK(Get<decltype(cudaStreamGetId)>("cudaStreamGetId_ptsz")(cudaStreamPerThread, &other_id) ==
        cudaSuccess);
  CHECK(id != other_id);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
  CHECK(NDT_RUNTIME(cudaStreamIsCapturing)(stream, &capturing) == cudaSuccess);
  CHECK(capturing == cudaStreamCaptureStatusNone);

  // Host work runs in stream order, after the copy before it.
  void* device_memory = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMalloc)(&device_memory, 64) == cudaSuccess);
  static char seen[64];
  char host[64];
  std::memset(host, 5, sizeof host);
  CHECK(NDT_RUNTIME(cudaMemcpyAsync)(device_memory, host, 64, cudaMemcpyHostToDevice, stream) ==
        cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpyAsync)(seen, device_memory, 64, cudaMemcpyDeviceToHost, stream) ==
        cudaSuccess);
  int ran = 0;
  CHECK(NDT_RUNTIME(cudaLaunchHostFunc)(
            stream, [](void* data) { *static_cast<int*>(data) += seen[63]; }, &ran) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamAddCallback)(
            stream,
            [](cudaStream_t, cudaError_t status, void* data) {
              if (status == cudaSuccess) *static_cast<int*>(data) += 100;
            },
            &ran, 0) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamAddCallback)(stream, nullptr, &ran, 0) == cudaErrorInvalidValue);
  cudaEvent_t event = nullptr;
  REQUIRE(NDT_RUNTIME(cudaEventCreate)(&event) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaEventRecordWithFlags)(event, stream, cudaEventRecordDefault) ==
        cudaSuccess);
  CHECK(NDT_RUNTIME(cudaEventSynchronize)(event) == cudaSuccess);
  CHECK(ran == 105);
  CHECK(NDT_RUNTIME(cudaEventDestroy)(event) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamDestroy)(stream) == cudaSuccess);

  void* pitched = nullptr;
  size_t pitch = 0;
  CHECK(NDT_RUNTIME(cudaMallocPitch)(&pitched, &pitch, 100, 3) == cudaSuccess);
  CHECK(pitch >= 100);
  CHECK(pitch % 256 == 0);
  CHECK(NDT_RUNTIME(cudaFree)(pitched) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFree)(device_memory) == cudaSuccess);

  // Kernel attributes and occupancy need a registered kernel (tests/corpus/host_callbacks.cu
  // uses them); any other pointer is not a device function.
  int not_a_kernel = 0;
  cudaFuncAttributes attributes;
  CHECK(NDT_RUNTIME(cudaFuncGetAttributes)(&attributes, &not_a_kernel) ==
        cudaErrorInvalidDeviceFunction);
  int blocks = 0;
  CHECK(NDT_RUNTIME(cudaOccupancyMaxActiveBlocksPerMultiprocessor)(
            &blocks, &not_a_kernel, 128, 0) == cudaErrorInvalidDeviceFunction);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorInvalidDeviceFunction);
}

TEST_CASE("2D copies move rows between pitched buffers and leave the padding alone", "[standin]") {
  // 3 rows of 5 bytes: the host rows 8 bytes apart, the device rows at cudaMallocPitch's pitch.
  unsigned char host[3][8];
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 8; ++c) host[r][c] = static_cast<unsigned char>(c < 5 ? 10 * r + c : 0xee);
  }
  void* device = nullptr;
  size_t pitch = 0;
  REQUIRE(NDT_RUNTIME(cudaMallocPitch)(&device, &pitch, 5, 3) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaMemset)(device, 0x77, pitch * 3) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpy2D)(device, pitch, host, 8, 5, 3, cudaMemcpyHostToDevice) ==
        cudaSuccess);
  std::vector<unsigned char> whole(pitch * 3);
  REQUIRE(NDT_RUNTIME(cudaMemcpy)(whole.data(), device, whole.size(), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  CHECK(whole[0] == 0);
  CHECK(whole[4] == 4);
  CHECK(whole[5] == 0x77);  // the device row's padding
  CHECK(whole[pitch + 2] == 12);
  CHECK(whole[2 * pitch + 4] == 24);

  // Back, rows packed 5 bytes apart, on a stream; then device to device into a second buffer.
  cudaStream_t stream = nullptr;
  REQUIRE(NDT_RUNTIME(cudaStreamCreate)(&stream) == cudaSuccess);
  unsigned char packed[15] = {};
  CHECK(NDT_RUNTIME(cudaMemcpy2DAsync)(packed, 5, device, pitch, 5, 3, cudaMemcpyDeviceToHost,
                                       stream) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamSynchronize)(stream) == cudaSuccess);
  CHECK(packed[0] == 0);
  CHECK(packed[7] == 12);
  CHECK(packed[14] == 24);
  void* other = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMalloc)(&other, 15) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpy2D)(other, 5, device, pitch, 5, 3, cudaMemcpyDefault) == cudaSuccess);
  unsigned char again[15] = {};
  REQUIRE(NDT_RUNTIME(cudaMemcpy)(again, other, 15, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::memcmp(again, packed, 15) == 0);

  // A pitch narrower than a row, and a span past the allocation, are refused.
  CHECK(NDT_RUNTIME(cudaMemcpy2D)(device, 4, host, 8, 5, 3, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidPitchValue);
  CHECK(NDT_RUNTIME(cudaMemcpy2D)(device, pitch, host, 8, 5, 4, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaMemcpy2D)(device, pitch, host, 8, 5, SIZE_MAX / 4,
                                  cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaFree)(other) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFree)(device) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamDestroy)(stream) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorInvalidValue);
}

TEST_CASE(
    "a capture's status, id and graph, and the thread's capture mode, as torch.cuda.graph "
    "asks for them",
    "[standin]") {
  cudaStream_t stream = nullptr;
  REQUIRE(NDT_RUNTIME(cudaStreamCreateWithFlags)(&stream, cudaStreamNonBlocking) == cudaSuccess);
  void* buffer = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMalloc)(&buffer, 64) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  unsigned long long id = 99, second_id = 0;
  CHECK(NDT_RUNTIME(cudaStreamGetCaptureInfo)(stream, &status, &id, nullptr, nullptr, nullptr,
                                              nullptr) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);

  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(NDT_RUNTIME(cudaThreadExchangeStreamCaptureMode)(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);  // the default, handed back
  REQUIRE(NDT_RUNTIME(cudaStreamBeginCapture)(stream, cudaStreamCaptureModeThreadLocal) ==
          cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemsetAsync)(buffer, 1, 64, stream) == cudaSuccess);
  cudaGraph_t captured = nullptr;
  size_t dependencies = 7;
  CHECK(NDT_RUNTIME(cudaStreamGetCaptureInfo)(stream, &status, &id, &captured, nullptr, nullptr,
                                              &dependencies) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  CHECK(id != 0);
  CHECK(captured != nullptr);
  CHECK(dependencies == 0);
  cudaGraph_t graph = nullptr;
  REQUIRE(NDT_RUNTIME(cudaStreamEndCapture)(stream, &graph) == cudaSuccess);
  CHECK(graph == captured);
  CHECK(NDT_RUNTIME(cudaThreadExchangeStreamCaptureMode)(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeRelaxed);  // what this thread set, restored below
  CHECK(NDT_RUNTIME(cudaThreadExchangeStreamCaptureMode)(&mode) == cudaSuccess);

  REQUIRE(NDT_RUNTIME(cudaStreamBeginCapture)(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamGetCaptureInfo)(stream, &status, &second_id, nullptr, nullptr,
                                              nullptr, nullptr) == cudaSuccess);
  CHECK(second_id != id);  // each capture sequence has its own
  cudaGraph_t second = nullptr;
  REQUIRE(NDT_RUNTIME(cudaStreamEndCapture)(stream, &second) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaGraphDestroy)(graph) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaGraphDestroy)(second) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFree)(buffer) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamDestroy)(stream) == cudaSuccess);
}

TEST_CASE("runtime errors have the runtime's names and descriptions", "[standin]") {
  CHECK(std::string(NDT_RUNTIME(cudaGetErrorName)(cudaErrorInvalidValue)) ==
        "cudaErrorInvalidValue");
  CHECK(std::string(NDT_RUNTIME(cudaGetErrorString)(cudaErrorInvalidValue)) == "invalid argument");
  CHECK(std::string(NDT_RUNTIME(cudaGetErrorName)(cudaErrorStubLibrary)) == "cudaErrorStubLibrary");
  CHECK(std::string(NDT_RUNTIME(cudaGetErrorName)(static_cast<cudaError_t>(123456))) ==
        "unrecognized error code");
}

}  // namespace

TEST_CASE("pinned host memory through the runtime: allocated, registered, mapped, freed",
          "[standin]") {
  void* pinned = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMallocHost)(&pinned, 64) == cudaSuccess);
  void* mapped = nullptr;
  REQUIRE(NDT_RUNTIME(cudaHostAlloc)(&mapped, 128, cudaHostAllocMapped | cudaHostAllocPortable) ==
          cudaSuccess);
  unsigned flags = 0;
  CHECK(NDT_RUNTIME(cudaHostGetFlags)(&flags, mapped) == cudaSuccess);
  CHECK(flags == (cudaHostAllocMapped | cudaHostAllocPortable));
  void* device = nullptr;
  CHECK(NDT_RUNTIME(cudaHostGetDevicePointer)(&device, mapped, 0) == cudaSuccess);
  CHECK(device == mapped);
  // A pinned buffer is a copy's source and destination like device memory.
  void* on_device = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMalloc)(&on_device, 64) == cudaSuccess);
  std::memset(pinned, 0x5a, 64);
  CHECK(NDT_RUNTIME(cudaMemcpy)(on_device, pinned, 64, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpy)(mapped, on_device, 64, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(static_cast<unsigned char*>(mapped)[63] == 0x5a);
  CHECK(NDT_RUNTIME(cudaFree)(pinned) == cudaErrorInvalidValue);  // not device memory
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaFreeHost)(pinned) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFreeHost)(mapped) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFreeHost)(mapped) == cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorInvalidValue);

  std::vector<float> own(256);
  REQUIRE(NDT_RUNTIME(cudaHostRegister)(own.data(), own.size() * sizeof(float),
                                        cudaHostRegisterMapped) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaHostRegister)(own.data() + 8, 16, 0) ==
        cudaErrorHostMemoryAlreadyRegistered);
  CHECK(NDT_RUNTIME(cudaHostGetDevicePointer)(&device, own.data() + 4, 0) == cudaSuccess);
  CHECK(device == own.data() + 4);
  CHECK(NDT_RUNTIME(cudaMemset)(on_device, 0, 64) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpy)(own.data(), on_device, 64, cudaMemcpyDeviceToHost) ==
        cudaSuccess);
  CHECK(NDT_RUNTIME(cudaHostUnregister)(own.data() + 1) == cudaErrorHostMemoryNotRegistered);
  CHECK(NDT_RUNTIME(cudaHostUnregister)(own.data()) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaHostUnregister)(own.data()) == cudaErrorHostMemoryNotRegistered);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorHostMemoryNotRegistered);
  CHECK(NDT_RUNTIME(cudaFree)(on_device) == cudaSuccess);
}

// With NDT_STANDIN_DEVICES=2 (its own CTest entry): each device has its primary context, memory
// and streams; work is refused on another device's stream; peer copies and peer access.
TEST_CASE("two devices: contexts, memory, streams, events and peer copies", "[two_devices]") {
  int count = 0;
  REQUIRE(NDT_RUNTIME(cudaGetDeviceCount)(&count) == cudaSuccess);
  REQUIRE(count == 2);
  CHECK(NDT_RUNTIME(cudaSetDevice)(2) == cudaErrorInvalidDevice);

  REQUIRE(NDT_RUNTIME(cudaSetDevice)(0) == cudaSuccess);
  float* on_0 = nullptr;
  cudaStream_t stream_0 = nullptr;
  cudaEvent_t event_0 = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMalloc)(reinterpret_cast<void**>(&on_0), 64) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaStreamCreateWithFlags)(&stream_0, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaEventCreate)(&event_0) == cudaSuccess);
  size_t free_0 = 0, total = 0;
  REQUIRE(NDT_RUNTIME(cudaMemGetInfo)(&free_0, &total) == cudaSuccess);

  REQUIRE(NDT_RUNTIME(cudaSetDevice)(1) == cudaSuccess);
  int device = -1;
  CHECK(NDT_RUNTIME(cudaGetDevice)(&device) == cudaSuccess);
  CHECK(device == 1);
  size_t free_1 = 0;
  REQUIRE(NDT_RUNTIME(cudaMemGetInfo)(&free_1, &total) == cudaSuccess);
  CHECK(free_1 == free_0 + 64);  // device 0's allocation is not device 1's memory
  float* on_1 = nullptr;
  cudaStream_t stream_1 = nullptr;
  REQUIRE(NDT_RUNTIME(cudaMalloc)(reinterpret_cast<void**>(&on_1), 64) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaStreamCreateWithFlags)(&stream_1, cudaStreamNonBlocking) == cudaSuccess);
  cudaPointerAttributes attributes{};
  REQUIRE(NDT_RUNTIME(cudaPointerGetAttributes)(&attributes, on_1) == cudaSuccess);
  CHECK(attributes.device == 1);

  // An event of device 0 is recorded on device 0's streams only; any stream may wait for it.
  CHECK(NDT_RUNTIME(cudaEventRecord)(event_0, stream_1) == cudaErrorInvalidResourceHandle);
  CHECK(NDT_RUNTIME(cudaEventRecord)(event_0, stream_0) == cudaErrorInvalidResourceHandle);
  REQUIRE(NDT_RUNTIME(cudaSetDevice)(0) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaEventRecord)(event_0, stream_0) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaSetDevice)(1) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamWaitEvent)(stream_1, event_0, 0) == cudaSuccess);

  int can = 0;
  CHECK(NDT_RUNTIME(cudaDeviceCanAccessPeer)(&can, 1, 0) == cudaSuccess);
  CHECK(can == 1);
  CHECK(NDT_RUNTIME(cudaDeviceCanAccessPeer)(&can, 1, 1) == cudaSuccess);
  CHECK(can == 0);
  CHECK(NDT_RUNTIME(cudaDeviceEnablePeerAccess)(0, 0) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaDeviceEnablePeerAccess)(0, 0) == cudaErrorPeerAccessAlreadyEnabled);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorPeerAccessAlreadyEnabled);

  // device 0 -> device 1 on device 1's stream, and back synchronously.
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  std::vector<float> back(16);
  REQUIRE(NDT_RUNTIME(cudaSetDevice)(0) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaMemcpy)(on_0, values.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaDeviceSynchronize)() == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaSetDevice)(1) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpyPeerAsync)(on_1, 1, on_0, 0, 64, stream_1) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamSynchronize)(stream_1) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpyPeer)(on_0, 0, on_1, 1, 64) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemcpy)(back.data(), on_0, 64, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == values);
  // The pointers must be memory of the devices named.
  CHECK(NDT_RUNTIME(cudaMemcpyPeer)(on_0, 1, on_1, 1, 64) == cudaErrorInvalidValue);

  CHECK(NDT_RUNTIME(cudaStreamDestroy)(stream_1) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFree)(on_1) == cudaSuccess);
  REQUIRE(NDT_RUNTIME(cudaSetDevice)(0) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaStreamDestroy)(stream_0) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaEventDestroy)(event_0) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaFree)(on_0) == cudaSuccess);
}

TEST_CASE("managed memory: host and device reach it at one address, hints change no value",
          "[standin]") {
  float* managed = nullptr;
  CHECK(NDT_RUNTIME(cudaMallocManaged)(reinterpret_cast<void**>(&managed), 0,
                                       cudaMemAttachGlobal) == cudaErrorInvalidValue);
  CHECK(NDT_RUNTIME(cudaMallocManaged)(reinterpret_cast<void**>(&managed), 64, 7) ==
        cudaErrorInvalidValue);
  REQUIRE(NDT_RUNTIME(cudaMallocManaged)(reinterpret_cast<void**>(&managed), 64,
                                         cudaMemAttachGlobal) == cudaSuccess);
  for (int i = 0; i < 16; ++i) managed[i] = static_cast<float>(i);  // written by the host
  cudaMemLocation device{};
  device.type = cudaMemLocationTypeDevice;
  device.id = 0;
  CHECK(NDT_RUNTIME(cudaMemAdvise)(managed, 64, cudaMemAdviseSetReadMostly, device) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemPrefetchAsync)(managed, 64, device, 0, nullptr) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaMemPrefetchAsync)(managed, 128, device, 0, nullptr) ==
        cudaErrorInvalidValue);
  std::vector<float> back(16);
  CHECK(NDT_RUNTIME(cudaMemcpy)(back.data(), managed, 64, cudaMemcpyDefault) == cudaSuccess);
  CHECK(back[15] == 15.0f);
  cudaPointerAttributes attributes{};
  CHECK(NDT_RUNTIME(cudaPointerGetAttributes)(&attributes, managed) == cudaSuccess);
  CHECK(attributes.device == 0);
  CHECK(NDT_RUNTIME(cudaFree)(managed) == cudaSuccess);
  CHECK(NDT_RUNTIME(cudaGetLastError)() == cudaErrorInvalidValue);
}
