// Tests of the stand-in driver's asynchronous streams (NDT_STANDIN_ASYNC=1, set by CTest for
// this executable): stream order, overlap across streams, event waits, the legacy default
// stream's implicit synchronisation, host waits. Host functions that block on a gate hold a
// stream's worker still, so the tests can see what has and has not run yet.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

namespace {

void* Driver() {
  static void* handle = dlopen(NDT_STANDIN_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  return handle;
}

template <typename Pfn>
Pfn Get(const char* name) {
  static const auto gpa =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(Driver(), "cuGetProcAddress_v2"));
  REQUIRE(gpa != nullptr);
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status;
  INFO(name);
  REQUIRE(gpa(name, &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS);
  return reinterpret_cast<Pfn>(pfn);
}

#define NDT_GET(name, version) PFN_##name##_##version name = Get<PFN_##name##_##version>(#name)

struct Api {
  NDT_GET(cuInit, v2000);
  NDT_GET(cuDevicePrimaryCtxRetain, v7000);
  NDT_GET(cuCtxSetCurrent, v4000);
  NDT_GET(cuCtxSynchronize, v13000);  // CUDA 13: cuCtxSynchronize_v2, which takes the context
  NDT_GET(cuMemAlloc, v3020);
  NDT_GET(cuMemFree, v3020);
  NDT_GET(cuMemcpyHtoD, v3020);
  NDT_GET(cuMemcpyDtoH, v3020);
  NDT_GET(cuMemcpyDtoDAsync, v3020);
  NDT_GET(cuMemsetD32Async, v3020);
  NDT_GET(cuStreamCreate, v2000);
  NDT_GET(cuStreamDestroy, v4000);
  NDT_GET(cuStreamSynchronize, v2000);
  NDT_GET(cuStreamQuery, v2000);
  NDT_GET(cuStreamWaitEvent, v3020);
  NDT_GET(cuLaunchHostFunc, v10000);
  NDT_GET(cuEventCreate, v2000);
  NDT_GET(cuEventRecord, v2000);
  NDT_GET(cuEventQuery, v2000);
  NDT_GET(cuEventSynchronize, v2000);
  NDT_GET(cuEventDestroy, v4000);
  NDT_GET(cuModuleLoadData, v2000);
  NDT_GET(cuModuleGetFunction, v2000);
  NDT_GET(cuLaunchKernel, v4000);
};

const Api& Setup() {
  static const Api api;
  static const bool ready = [] {
    CUdevice device = 0;
    CUcontext context = nullptr;
    return api.cuInit(0) == CUDA_SUCCESS &&
           api.cuDevicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS &&
           api.cuCtxSetCurrent(context) == CUDA_SUCCESS;
  }();
  REQUIRE(ready);
  REQUIRE(api.cuCtxSetCurrent != nullptr);
  return api;
}

// Holds a stream's worker inside a host function until Open().
class Gate {
 public:
  void Hold(const Api& api, CUstream stream) {
    REQUIRE(api.cuLaunchHostFunc(stream, &Gate::Wait, this) == CUDA_SUCCESS);
  }
  void Open() { open_.set_value(); }

 private:
  static void Wait(void* self) { static_cast<Gate*>(self)->opened_.wait(); }
  std::promise<void> open_;
  std::shared_future<void> opened_ = open_.get_future().share();
};

CUdeviceptr Buffer(const Api& api, std::size_t words) {
  CUdeviceptr p = 0;
  REQUIRE(api.cuMemAlloc(&p, words * 4) == CUDA_SUCCESS);
  return p;
}

std::uint32_t Word(CUdeviceptr p, std::size_t i = 0) {  // device memory is host memory here
  return reinterpret_cast<volatile std::uint32_t*>(p)[i];
}

TEST_CASE("queued work runs later, in stream order, and synchronisation waits for it",
          "[standin]") {
  const Api& api = Setup();
  CUstream s = nullptr;
  REQUIRE(api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const CUdeviceptr a = Buffer(api, 64);
  const CUdeviceptr b = Buffer(api, 64);
  Gate gate;
  gate.Hold(api, s);
  REQUIRE(api.cuMemsetD32Async(a, 7, 64, s) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyDtoDAsync(b, a, 64 * 4, s) == CUDA_SUCCESS);
  REQUIRE(api.cuMemsetD32Async(a, 9, 64, s) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(api.cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
  CHECK(Word(a) == 0);
  gate.Open();
  REQUIRE(api.cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(api.cuStreamQuery(s) == CUDA_SUCCESS);
  CHECK(Word(b, 63) == 7);  // the copy ran between the two memsets
  CHECK(Word(a, 63) == 9);
  CHECK(api.cuStreamDestroy(s) == CUDA_SUCCESS);
  CHECK(api.cuMemFree(a) == CUDA_SUCCESS);
  CHECK(api.cuMemFree(b) == CUDA_SUCCESS);
}

TEST_CASE("streams run concurrently: one stream's work completes while another's is held",
          "[standin]") {
  const Api& api = Setup();
  CUstream held = nullptr;
  CUstream free_running = nullptr;
  REQUIRE(api.cuStreamCreate(&held, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamCreate(&free_running, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const CUdeviceptr p = Buffer(api, 16);
  Gate gate;
  gate.Hold(api, held);
  REQUIRE(api.cuMemsetD32Async(p, 1, 8, held) == CUDA_SUCCESS);
  REQUIRE(api.cuMemsetD32Async(p + 32, 2, 8, free_running) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamSynchronize(free_running) == CUDA_SUCCESS);
  CHECK(Word(p, 8) == 2);
  CHECK(Word(p, 0) == 0);
  CHECK(api.cuStreamQuery(held) == CUDA_ERROR_NOT_READY);
  gate.Open();
  REQUIRE(api.cuStreamSynchronize(held) == CUDA_SUCCESS);
  CHECK(Word(p, 0) == 1);
  api.cuStreamDestroy(held);
  api.cuStreamDestroy(free_running);
  api.cuMemFree(p);
}

TEST_CASE("an event wait orders work across streams and event queries see pending records",
          "[standin]") {
  const Api& api = Setup();
  CUstream producer = nullptr;
  CUstream consumer = nullptr;
  REQUIRE(api.cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUevent ready = nullptr;
  REQUIRE(api.cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  CHECK(api.cuEventQuery(ready) == CUDA_SUCCESS);  // never recorded: complete
  const CUdeviceptr data = Buffer(api, 32);
  const CUdeviceptr out = Buffer(api, 32);
  Gate gate;
  gate.Hold(api, producer);
  REQUIRE(api.cuMemsetD32Async(data, 42, 32, producer) == CUDA_SUCCESS);
  REQUIRE(api.cuEventRecord(ready, producer) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamWaitEvent(consumer, ready, 0) == CUDA_SUCCESS);
  REQUIRE(api.cuMemcpyDtoDAsync(out, data, 32 * 4, consumer) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(api.cuEventQuery(ready) == CUDA_ERROR_NOT_READY);
  CHECK(api.cuStreamQuery(consumer) == CUDA_ERROR_NOT_READY);
  gate.Open();
  REQUIRE(api.cuEventSynchronize(ready) == CUDA_SUCCESS);
  CHECK(Word(data, 31) == 42);
  REQUIRE(api.cuStreamSynchronize(consumer) == CUDA_SUCCESS);
  CHECK(Word(out, 31) == 42);
  api.cuEventDestroy(ready);
  api.cuStreamDestroy(producer);
  api.cuStreamDestroy(consumer);
  api.cuMemFree(data);
  api.cuMemFree(out);
}

TEST_CASE("the legacy default stream waits for blocking streams, not for non-blocking ones",
          "[standin]") {
  const Api& api = Setup();
  CUstream blocking = nullptr;
  CUstream non_blocking = nullptr;
  REQUIRE(api.cuStreamCreate(&blocking, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const CUdeviceptr p = Buffer(api, 16);
  Gate gate;
  gate.Hold(api, blocking);
  REQUIRE(api.cuMemsetD32Async(p, 5, 4, nullptr) == CUDA_SUCCESS);  // legacy: waits
  REQUIRE(api.cuMemsetD32Async(p + 16, 6, 4, non_blocking) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamSynchronize(non_blocking) == CUDA_SUCCESS);
  CHECK(Word(p, 4) == 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(api.cuStreamQuery(nullptr) == CUDA_ERROR_NOT_READY);
  CHECK(Word(p, 0) == 0);
  // A blocking stream's later work waits for the legacy stream's.
  CUstream other = nullptr;
  REQUIRE(api.cuStreamCreate(&other, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(api.cuMemsetD32Async(p + 32, 7, 4, other) == CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(api.cuStreamQuery(other) == CUDA_ERROR_NOT_READY);
  gate.Open();
  REQUIRE(api.cuStreamSynchronize(other) == CUDA_SUCCESS);
  CHECK(Word(p, 0) == 5);
  CHECK(Word(p, 8) == 7);
  REQUIRE(api.cuCtxSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(api.cuStreamQuery(blocking) == CUDA_SUCCESS);
  api.cuStreamDestroy(blocking);
  api.cuStreamDestroy(non_blocking);
  api.cuStreamDestroy(other);
  api.cuMemFree(p);
}

TEST_CASE("kernels are queued: a synchronous copy sees their result, a fault comes at the sync",
          "[standin]") {
  const Api& api = Setup();
  CUmodule module = nullptr;
  REQUIRE(api.cuModuleLoadData(&module, "// stand-in PTX\n") == CUDA_SUCCESS);
  CUfunction add = nullptr;
  REQUIRE(api.cuModuleGetFunction(&add, module, "_Z9VectorAddPKfS0_Pfi") == CUDA_SUCCESS);
  constexpr int kN = 4096;
  std::vector<float> x(kN, 1.5f);
  const CUdeviceptr a = Buffer(api, kN);
  const CUdeviceptr c = Buffer(api, kN);
  REQUIRE(api.cuMemcpyHtoD(a, x.data(), kN * 4) == CUDA_SUCCESS);
  int n = kN;
  void* args[] = {const_cast<CUdeviceptr*>(&a), const_cast<CUdeviceptr*>(&a),
                  const_cast<CUdeviceptr*>(&c), &n};
  for (int i = 0; i < 8; ++i) {
    REQUIRE(api.cuLaunchKernel(add, 16, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr) ==
            CUDA_SUCCESS);
  }
  std::vector<float> y(kN);
  REQUIRE(api.cuMemcpyDtoH(y.data(), c, kN * 4) == CUDA_SUCCESS);
  CHECK(y[kN - 1] == 3.0f);
  CUdeviceptr wild = 64;  // outside every allocation
  void* bad[] = {&wild, &wild, &wild, &n};
  CHECK(api.cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, nullptr, bad, nullptr) == CUDA_SUCCESS);
  CHECK(api.cuStreamSynchronize(nullptr) == CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(api.cuStreamSynchronize(nullptr) == CUDA_SUCCESS);  // reported once, not sticky
  api.cuMemFree(a);
  api.cuMemFree(c);
}

TEST_CASE("two streams writing one buffer without an event really race", "[standin]") {
  const Api& api = Setup();
  CUstream s1 = nullptr;
  CUstream s2 = nullptr;
  REQUIRE(api.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const CUdeviceptr p = Buffer(api, 1);
  // Which memset lands last depends on the workers' timing; over many tries both orders occur.
  bool saw_one = false;
  bool saw_two = false;
  for (int i = 0; i < 2000 && !(saw_one && saw_two); ++i) {
    REQUIRE(api.cuMemsetD32Async(p, 1, 1, s1) == CUDA_SUCCESS);
    REQUIRE(api.cuMemsetD32Async(p, 2, 1, s2) == CUDA_SUCCESS);
    REQUIRE(api.cuCtxSynchronize(nullptr) == CUDA_SUCCESS);
    (Word(p) == 1 ? saw_one : saw_two) = true;
  }
  CHECK(saw_one);
  CHECK(saw_two);
  api.cuStreamDestroy(s1);
  api.cuStreamDestroy(s2);
  api.cuMemFree(p);
}

}  // namespace
