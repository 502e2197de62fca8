// What the hook benchmarks share: where they find the tracer and the driver they measure (this
// build's libndtrace.so and stand-in directory, unless the environment names others: a bundle
// run on a GPU machine, where the build tree does not exist; tools/gpu_suite.sh sets both), and
// how their measured processes reach the driver.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ndt::bench {

// NDTRACE_BENCH_TRACER, else the libndtrace.so this build made. Exits (status 3) when there is
// no such file: the loader would run the "traced" process untraced and the figures would lie.
// The program's own work between two calls (`--gap NS` of bench_hooks and
// bench_library_hooks): spins for `ns` ns.
inline void Work(long ns) {
  if (ns <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// `--gap NS`'s value, or exits 2 saying why.
inline long ParseGap(const char* text) {
  char* end = nullptr;
  const long ns = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || ns < 0 || ns > 1000000) {
    std::fprintf(stderr, "error: --gap %s: expected ns from 0 to 1000000\n", text);
    std::exit(2);
  }
  return ns;
}

inline std::string TracerPath() {
  const char* path = std::getenv("NDTRACE_BENCH_TRACER");
  const std::string tracer = path != nullptr ? path : NDT_TRACER_LIB;
  if (access(tracer.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "error: no tracer at %s (NDTRACE_BENCH_TRACER names another)\n",
                 tracer.c_str());
    std::exit(3);
  }
  return tracer;
}

// The measured processes' whole LD_LIBRARY_PATH: NDTRACE_BENCH_LIBRARY_PATH when set (empty
// included: the loader's default search, which finds a real driver), else the stand-in directory.
inline std::string LibraryPath() {
  const char* path = std::getenv("NDTRACE_BENCH_LIBRARY_PATH");
  return path != nullptr ? path : NDT_STANDIN_DIR;
}

// The driver's cuGetProcAddress_v2, from libcuda.so.1 opened as cudart opens it. Exits
// (status 3) when there is no driver to open.
inline void* DriverProcAddress() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "error: %s\n", dlerror());
    std::exit(3);
  }
  return dlsym(driver, "cuGetProcAddress_v2");
}

// The driver function `name`, through the driver's cuGetProcAddress_v2 as cudart reaches it.
// Exits (status 3) when the driver has no such function.
template <typename T>
T ResolveDriver(void* cuGetProcAddress_v2, const char* name) {
  using Lookup =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  if (reinterpret_cast<Lookup>(cuGetProcAddress_v2)(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT,
                                                    &status) != CUDA_SUCCESS ||
      fn == nullptr) {
    std::fprintf(stderr, "error: cannot resolve %s\n", name);
    std::exit(3);
  }
  return reinterpret_cast<T>(fn);
}

// The driver's cuMemsetD8 and a 16-byte device buffer for it, in device 0's primary context,
// reached as cudart reaches the driver: what the hook benchmarks time. Exits (status 3) when the
// driver cannot be set up.
struct MemsetTarget {
  CUresult (*memset)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUdeviceptr buffer = 0;
};

inline MemsetTarget SetUpMemset() {
  void* gpa = DriverProcAddress();
  auto init = ResolveDriver<CUresult (*)(unsigned)>(gpa, "cuInit");
  auto device_get = ResolveDriver<CUresult (*)(CUdevice*, int)>(gpa, "cuDeviceGet");
  auto retain = ResolveDriver<CUresult (*)(CUcontext*, CUdevice)>(gpa, "cuDevicePrimaryCtxRetain");
  auto set_current = ResolveDriver<CUresult (*)(CUcontext)>(gpa, "cuCtxSetCurrent");
  auto alloc = ResolveDriver<CUresult (*)(CUdeviceptr*, size_t)>(gpa, "cuMemAlloc");
  MemsetTarget target;
  target.memset =
      ResolveDriver<CUresult (*)(CUdeviceptr, unsigned char, size_t)>(gpa, "cuMemsetD8");
  CUdevice device;
  CUcontext context;
  if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
      retain(&context, device) != CUDA_SUCCESS || set_current(context) != CUDA_SUCCESS ||
      alloc(&target.buffer, 16) != CUDA_SUCCESS) {
    std::fprintf(stderr, "error: driver setup failed\n");
    std::exit(3);
  }
  return target;
}

}  // namespace ndt::bench
