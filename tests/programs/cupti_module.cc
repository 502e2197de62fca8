// A CUPTI client inside a shared library that its program loads with dlopen(RTLD_LOCAL), as
// Python loads PyTorch's extension modules and, with them, the libcupti.so.13 Kineto links:
// libcupti is then in no global lookup scope. ndtrace's interposed cuptiActivityRegisterCallbacks
// must still reach it (on an H200, torch.profiler counted no kernel under ndtrace: the
// interposer looked for the real function with RTLD_NEXT, which does not search local scopes).
// Driver API only: it sets memory with cuMemsetD8 and counts CUPTI's MEMSET records.
// Loaded by cupti_loader.cc; exports ndt_cupti_module_run.
#include <cuda.h>
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr size_t kBufferBytes = 64 * 1024;
int memsets = 0;

void CUPTIAPI Request(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI Complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) ++memsets;
  }
  std::free(buffer);
}

bool Ok(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return true;
  std::fprintf(stderr, "cupti_module: %s: CUPTI error %d\n", what, static_cast<int>(result));
  return false;
}

bool Ok(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "cupti_module: %s: CUresult %d\n", what, static_cast<int>(result));
  return false;
}

bool StartProfiler() {
  return Ok(cuptiActivityRegisterCallbacks(Request, Complete), "cuptiActivityRegisterCallbacks") &&
         Ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable");
}

}  // namespace

// Sets 16 bytes `sets` times, with the profiler started before the first CUDA call (`early`) or
// after the first memset; returns the MEMSET records CUPTI delivered, -1 on an error.
extern "C" __attribute__((visibility("default"))) int ndt_cupti_module_run(int early, int sets) {
  if (early != 0 && !StartProfiler()) return -1;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUdeviceptr memory = 0;
  if (!Ok(cuInit(0), "cuInit") || !Ok(cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !Ok(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") ||
      !Ok(cuCtxSetCurrent(context), "cuCtxSetCurrent") ||
      !Ok(cuMemAlloc(&memory, 16), "cuMemAlloc") ||
      !Ok(cuMemsetD8(memory, 0, 16), "cuMemsetD8") ||  // counted only when early
      !Ok(cuCtxSynchronize(), "cuCtxSynchronize")) {
    return -1;
  }
  if (early == 0 && !StartProfiler()) return -1;
  for (int i = 0; i < sets; ++i) {
    if (!Ok(cuMemsetD8(memory, static_cast<unsigned char>(i), 16), "cuMemsetD8")) return -1;
  }
  if (!Ok(cuCtxSynchronize(), "cuCtxSynchronize") ||
      !Ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll") ||
      !Ok(cuMemFree(memory), "cuMemFree")) {
    return -1;
  }
  return memsets;
}
