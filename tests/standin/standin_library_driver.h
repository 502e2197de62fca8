// How the stand-in CUDA libraries (cuBLAS, cuBLASLt, cuRAND, NCCL) reach the stand-in driver:
// as the real ones do, dlopen("libcuda.so.1") + cuGetProcAddress_v2 at CUDA 13.0, never
// linking it. Each library includes this once; everything has internal linkage.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace {

// The driver functions the stand-in libraries use; null when the driver lacks one.
struct Driver {
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*, CUcontext) = nullptr;  // CUDA 13: cuCtxGetDevice_v2
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*memcpy_2d)(const CUDA_MEMCPY2D*) = nullptr;
  CUresult (*memcpy_2d_async)(const CUDA_MEMCPY2D*, CUstream) = nullptr;
};

const Driver& TheDriver() {
  static const Driver driver = [] {
    Driver found;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return found;
    using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult*);
    const auto get = reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
    if (get == nullptr) return found;
    const auto lookup = [get](const char* name, auto*& slot) {
      void* pointer = nullptr;
      CUdriverProcAddressQueryResult status;
      if (get(name, &pointer, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS) {
        slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(pointer);
      }
    };
    // The stand-in driver's own synchronise, out of a tracer's sight: a real library's call
    // is asynchronous and synchronises nothing, so a traced program must not show one.
    found.stream_synchronize = reinterpret_cast<CUresult (*)(CUstream)>(
        dlsym(library, "ndt_standin_stream_synchronize"));
    if (found.stream_synchronize == nullptr) {
      lookup("cuStreamSynchronize", found.stream_synchronize);
    }
    lookup("cuMemGetAddressRange", found.address_range);
    lookup("cuMemAlloc", found.mem_alloc);
    lookup("cuMemFree", found.mem_free);
    lookup("cuCtxGetDevice", found.ctx_get_device);
    lookup("cuDeviceGetAttribute", found.device_attribute);
    lookup("cuModuleLoadData", found.module_load_data);
    lookup("cuModuleGetFunction", found.module_get_function);
    lookup("cuLaunchKernel", found.launch_kernel);
    lookup("cuMemcpy2D", found.memcpy_2d);
    lookup("cuMemcpy2DAsync", found.memcpy_2d_async);
    return found;
  }();
  return driver;
}

// Waits for `stream`'s work through the driver; false when it cannot.
[[maybe_unused]] bool Synchronize(cudaStream_t stream) {
  const Driver& driver = TheDriver();
  return driver.stream_synchronize != nullptr &&
         driver.stream_synchronize(reinterpret_cast<CUstream>(stream)) == CUDA_SUCCESS;
}

// The library's own kernel, as a real library launches one (or several) from inside its call:
// through the driver entry points cuGetProcAddress handed out (a tracer's, when one is there),
// with a by-value parameter struct that holds the call's device pointers, as CUTLASS's Params
// do. Registered in standin_kernels.cc as standin_library_entry(LibraryParams); it computes
// nothing (the library computes on the host, AsKernel), it is there to be seen. The launch is
// then waited for, out of a tracer's sight (Synchronize), with whatever a tracer enqueued
// around it: the host computation that follows comes after it in stream order, as on a GPU.
// Does nothing when the driver lacks a function or the module does not load.
struct LibraryParams {
  const void* pointers[3];
  uint32_t m = 0, n = 0, k = 0, reserved = 0;
};
static_assert(sizeof(LibraryParams) == 40);

[[maybe_unused]] void LaunchLibraryKernel(cudaStream_t stream, LibraryParams params) {
  const Driver& driver = TheDriver();
  static const CUfunction function = [&driver]() -> CUfunction {
    if (driver.module_load_data == nullptr || driver.module_get_function == nullptr) {
      return nullptr;
    }
    static constexpr char kImage[] =
        "//\n// stand-in library kernels\n//\n.version 9.0\n.target sm_90\n.address_size 64\n"
        ".visible .entry _Z21standin_library_entry13LibraryParams("
        ".param .align 8 .b8 params[40])\n{\n\tret;\n}\n";
    CUmodule module = nullptr;
    CUfunction found = nullptr;
    if (driver.module_load_data(&module, kImage) != CUDA_SUCCESS ||
        driver.module_get_function(&found, module, "_Z21standin_library_entry13LibraryParams") !=
            CUDA_SUCCESS) {
      return nullptr;
    }
    return found;
  }();
  if (function == nullptr || driver.launch_kernel == nullptr) return;
  void* args[] = {&params};
  driver.launch_kernel(function, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(stream), args,
                       nullptr);
  Synchronize(stream);
}

// Whether [pointer, pointer + bytes) lies inside one device allocation.
[[maybe_unused]] bool IsDeviceRange(const void* pointer, size_t bytes) {
  const Driver& driver = TheDriver();
  if (driver.address_range == nullptr || pointer == nullptr) return false;
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto address = reinterpret_cast<CUdeviceptr>(pointer);
  if (driver.address_range(&base, &size, address) != CUDA_SUCCESS) return false;
  return address + bytes <= base + size;
}

}  // namespace
