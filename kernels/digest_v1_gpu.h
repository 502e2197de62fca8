// Launching the digest v1 kernels (digest_v1.cu) through the CUDA driver API: what the tracer,
// the GPU tests and bench_digest_gpu share. Header-only; needs <cuda.h> and the embedded fat
// binary (target ndt_kernels_fatbin).
//
// The driver is reached only through the cuGetProcAddress_v2 the caller hands in, so the
// tracer can pass the real driver's (never its own hooks) and tests the one they loaded.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "kernels/digest_v1_core.h"
#include "kernels/digest_v1_fatbin.h"

namespace ndt::kernels {

class DigestV1Gpu {
 public:
  using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult*);

  // Loads the kernels into the current context. False, with `error` set, when the driver lacks
  // a function or the module does not load (no sm_90-compatible device, no context).
  bool Load(GetProcAddressFn get_proc_address, std::string* error) {
    const auto resolve = [&](const char* name, void** slot) {
      CUdriverProcAddressQueryResult status;
      if (get_proc_address(name, slot, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
              CUDA_SUCCESS ||
          *slot == nullptr) {
        *error = std::string("the driver lacks ") + name;
        return false;
      }
      return true;
    };
    if (!resolve("cuModuleLoadData", reinterpret_cast<void**>(&module_load_data_)) ||
        !resolve("cuModuleGetFunction", reinterpret_cast<void**>(&module_get_function_)) ||
        !resolve("cuLaunchKernel", reinterpret_cast<void**>(&launch_kernel_))) {
      return false;
    }
    CUmodule module = nullptr;
    if (const CUresult result = module_load_data_(&module, kDigestV1Fatbin);
        result != CUDA_SUCCESS) {
      *error = "cuModuleLoadData of the digest kernels returned " + std::to_string(result);
      return false;
    }
    if (module_get_function_(&digest_, module, "ndt_digest_v1") != CUDA_SUCCESS ||
        module_get_function_(&zero_, module, "ndt_digest_v1_zero") != CUDA_SUCCESS) {
      *error = "the digest module lacks its kernels";
      return false;
    }
    return true;
  }

  // Enqueues on `stream` the digest of the `bytes` bytes at `data`, one kernel: afterwards, in
  // stream order, out[0..6] hold the digest (and the f32 summary when `partials` is not 0) and
  // then out[7] holds `ticket` (layout: digest_v1_core.h). `scratch` is kScratchWords words of
  // device memory that are zero (the kernel leaves them zero again); `partials`, 0 or
  // kMaxGrid doubles of device memory; `out`, kOutWords words the device can write (device
  // memory, or mapped pinned host memory). `grid` 0 picks one; at most kMaxGrid; `block` a
  // multiple of 32 up to 1024.
  CUresult Enqueue(CUdeviceptr data, uint64_t bytes, CUdeviceptr scratch, CUdeviceptr partials,
                   CUdeviceptr out, uint64_t ticket, CUstream stream, unsigned grid = 0,
                   unsigned block = 256) const {
    if (grid == 0) {
      // Enough CTAs to fill a large GPU, few enough that each thread sums many blocks.
      const uint64_t blocks16 = (bytes + 15) / 16;
      const uint64_t wanted = (blocks16 + block * 16 - 1) / (block * 16);
      grid = static_cast<unsigned>(wanted < 1                     ? 1
                                   : wanted > digest_v1::kMaxGrid ? digest_v1::kMaxGrid
                                                                  : wanted);
    }
    if (grid > digest_v1::kMaxGrid) return CUDA_ERROR_INVALID_VALUE;
    unsigned long long length = bytes, tag = ticket;
    void* args[] = {&data, &length, &scratch, &partials, &out, &tag};
    return launch_kernel_(digest_, grid, 1, 1, block, 1, 1, 0, stream, args, nullptr);
  }

  // Enqueues on `stream` the zeroing of `count` 8-byte words at `words` (scratch before first
  // use).
  CUresult Zero(CUdeviceptr words, uint64_t count, CUstream stream) const {
    unsigned long long n = count;
    void* args[] = {&words, &n};
    const uint64_t wanted = (count + 255) / 256;
    const auto grid = static_cast<unsigned>(wanted < 1 ? 1 : wanted > 1056 ? 1056 : wanted);
    return launch_kernel_(zero_, grid, 1, 1, 256, 1, 1, 0, stream, args, nullptr);
  }

 private:
  CUresult (*module_load_data_)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function_)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel_)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**) = nullptr;
  CUfunction digest_ = nullptr;
  CUfunction zero_ = nullptr;
};

}  // namespace ndt::kernels
