// How the stand-in CUDA libraries (cuBLAS, cuBLASLt, cuRAND, NCCL) reach the stand-in driver:
// as the real ones do, dlopen("libcuda.so.1") + cuGetProcAddress_v2 at CUDA 13.0, never
// linking it. Each library includes this once; everything has internal linkage.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <type_traits>

namespace {

// The driver functions the stand-in libraries use; null when the driver lacks one.
struct Driver {
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
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
    lookup("cuCtxGetDevice", found.ctx_get_device);
    lookup("cuDeviceGetAttribute", found.device_attribute);
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
