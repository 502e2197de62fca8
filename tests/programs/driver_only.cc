// Reaches the CUDA driver the way a statically linked cudart, cuBLAS or cuDNN does: dlopen
// "libcuda.so.1", dlsym "cuGetProcAddress_v2", and every other function through it. Loads an
// embedded fat binary (driver_only_kernels.cu, built with nvcc --fatbin) with cuModuleLoadData,
// runs ScaleOffset over 4096 words and prints the checksum of the result.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "driver_only_fatbin.h"
#include "program_checksum.h"

namespace {

PFN_cuGetProcAddress_v12000 g_get_proc_address = nullptr;
PFN_cuGetErrorName_v6000 g_get_error_name = nullptr;

template <typename Pfn>
Pfn Resolve(const char* name) {
  void* address = nullptr;
  CUdriverProcAddressQueryResult status;
  if (g_get_proc_address(name, &address, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
          CUDA_SUCCESS ||
      address == nullptr) {
    std::fprintf(stderr, "driver_only: cuGetProcAddress_v2(%s) failed\n", name);
    return nullptr;
  }
  return reinterpret_cast<Pfn>(address);
}

bool Ok(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return true;
  const char* name = "?";
  if (g_get_error_name != nullptr) g_get_error_name(result, &name);
  std::fprintf(stderr, "driver_only: %s: %s (%d)\n", what, name, static_cast<int>(result));
  return false;
}

}  // namespace

int main() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "driver_only: %s\n", dlerror());
    return 1;
  }
  g_get_proc_address =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (g_get_proc_address == nullptr) {
    std::fprintf(stderr, "driver_only: no cuGetProcAddress_v2 in libcuda.so.1\n");
    return 1;
  }
  g_get_error_name = Resolve<PFN_cuGetErrorName_v6000>("cuGetErrorName");
  const auto init = Resolve<PFN_cuInit_v2000>("cuInit");
  const auto device_get = Resolve<PFN_cuDeviceGet_v2000>("cuDeviceGet");
  const auto retain = Resolve<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain");
  const auto release = Resolve<PFN_cuDevicePrimaryCtxRelease_v11000>("cuDevicePrimaryCtxRelease");
  const auto set_current = Resolve<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent");
  const auto load = Resolve<PFN_cuModuleLoadData_v2000>("cuModuleLoadData");
  const auto get_function = Resolve<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction");
  const auto unload = Resolve<PFN_cuModuleUnload_v2000>("cuModuleUnload");
  const auto alloc = Resolve<PFN_cuMemAlloc_v3020>("cuMemAlloc");
  const auto mem_free = Resolve<PFN_cuMemFree_v3020>("cuMemFree");
  const auto htod = Resolve<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD");
  const auto dtoh = Resolve<PFN_cuMemcpyDtoH_v3020>("cuMemcpyDtoH");
  const auto launch = Resolve<PFN_cuLaunchKernel_v4000>("cuLaunchKernel");
  const auto synchronize = Resolve<PFN_cuCtxSynchronize_v13000>("cuCtxSynchronize");
  if (!init || !device_get || !retain || !release || !set_current || !load || !get_function ||
      !unload || !alloc || !mem_free || !htod || !dtoh || !launch || !synchronize) {
    return 1;
  }

  constexpr int kN = 4096;
  constexpr unsigned kMul = 2654435761u;
  constexpr unsigned kAdd = 12345u;
  std::vector<std::uint32_t> data(kN);
  for (int i = 0; i < kN; ++i) data[i] = static_cast<std::uint32_t>(i);

  CUdevice device;
  CUcontext context;
  CUmodule module;
  CUfunction function;
  CUdeviceptr d_data;
  if (!Ok(init(0), "cuInit") || !Ok(device_get(&device, 0), "cuDeviceGet") ||
      !Ok(retain(&context, device), "cuDevicePrimaryCtxRetain") ||
      !Ok(set_current(context), "cuCtxSetCurrent") ||
      !Ok(load(&module, kDriverOnlyFatbin), "cuModuleLoadData") ||
      !Ok(get_function(&function, module, "_Z11ScaleOffsetPjjji"), "cuModuleGetFunction") ||
      !Ok(alloc(&d_data, kN * sizeof(std::uint32_t)), "cuMemAlloc") ||
      !Ok(htod(d_data, data.data(), kN * sizeof(std::uint32_t)), "cuMemcpyHtoD")) {
    return 1;
  }
  unsigned mul = kMul, add = kAdd;
  int n = kN;
  void* params[] = {&d_data, &mul, &add, &n};
  if (!Ok(launch(function, 16, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel") ||
      !Ok(synchronize(nullptr), "cuCtxSynchronize") ||
      !Ok(dtoh(data.data(), d_data, kN * sizeof(std::uint32_t)), "cuMemcpyDtoH") ||
      !Ok(mem_free(d_data), "cuMemFree") || !Ok(unload(module), "cuModuleUnload") ||
      !Ok(release(device), "cuDevicePrimaryCtxRelease")) {
    return 1;
  }
  for (int i = 0; i < kN; ++i) {
    const std::uint32_t expected = static_cast<std::uint32_t>(i) * kMul + kAdd;
    if (data[i] != expected) {
      std::fprintf(stderr, "driver_only: data[%d] = %u, expected %u\n", i, data[i], expected);
      return 1;
    }
  }
  ndt::programs::PrintChecksum(data.data(), data.size() * sizeof(std::uint32_t));
  return 0;
}
