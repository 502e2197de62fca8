// The driver entry points ndtrace hooks, by exact exported ABI variant, and the real driver
// functions behind them.
//
// Every hooked variant (`cuLaunchKernel` and `cuLaunchKernel_ptsz` are two) is exported by
// libndtrace.so under its own name (hooks_driver.cc) and has a slot holding the real
// libcuda.so.1 function of the same name, found with the real dlsym on the handle of
// libcuda.so.1 — never through our own hooks. A pointer the driver hands out (from
// cuGetProcAddress or dlsym) is mapped to our wrapper by comparing it with the slots, so the
// caller gets the wrapper of exactly the ABI variant the driver chose for it.
//
// All functions are thread-safe and never throw.
#pragma once

#include <cstdint>

// X(name): every hooked driver ABI variant. Keep in sync with libndtrace.map.
#define NDT_HOOKED_DRIVER_FUNCTIONS(X)                                                            \
  X(cuMemAlloc_v2)                                                                                \
  X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemFreeAsync) X(                 \
      cuMemFreeAsync_ptsz) X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuLibraryLoadData)         \
      X(cuModuleGetFunction) X(cuLibraryGetKernel) X(cuKernelGetFunction) X(cuLaunchKernel) X(    \
          cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuMemcpyHtoD_v2)    \
          X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2)   \
              X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz)        \
                  X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2)    \
                      X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync)  \
                          X(cuMemcpyAsync_ptsz) X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds)            \
                              X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds) X(cuMemsetD32_v2)          \
                                  X(cuMemsetD32_v2_ptds) X(cuMemsetD8Async)                       \
                                      X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async)                 \
                                          X(cuMemsetD16Async_ptsz) X(cuMemsetD32Async)            \
                                              X(cuMemsetD32Async_ptsz) X(cuStreamSynchronize)     \
                                                  X(cuStreamSynchronize_ptsz) X(cuCtxSynchronize) \
                                                      X(cuCtxSynchronize_v2)              \
  NDT_HOOKED_DRIVER_FUNCTIONS_2(X)

// Streams, events, more allocators, virtual memory mappings and graphs.
#define NDT_HOOKED_DRIVER_FUNCTIONS_2(X) \
  X(cuMemAllocFromPoolAsync)             \
  X(cuMemAllocFromPoolAsync_ptsz)        \
  X(cuMemAllocManaged)                   \
  X(cuMemAllocPitch_v2)                  \
  X(cuMemMap)                            \
  X(cuMemUnmap)                          \
  X(cuStreamCreate)                      \
  X(cuStreamCreateWithPriority)          \
  X(cuStreamDestroy_v2)                  \
  X(cuEventCreate)                       \
  X(cuEventDestroy_v2)                   \
  X(cuEventRecord)                       \
  X(cuEventRecord_ptsz)                  \
  X(cuEventRecordWithFlags)              \
  X(cuEventRecordWithFlags_ptsz)         \
  X(cuStreamWaitEvent)                   \
  X(cuStreamWaitEvent_ptsz)              \
  X(cuEventSynchronize)                  \
  X(cuStreamBeginCapture_v2)             \
  X(cuStreamBeginCapture_v2_ptsz)        \
  X(cuStreamEndCapture)                  \
  X(cuStreamEndCapture_ptsz)             \
  X(cuGraphInstantiateWithFlags)         \
  X(cuGraphLaunch)                       \
  X(cuGraphLaunch_ptsz)                  \
  X(cuGraphExecDestroy)                  \
  X(cuGraphDestroy)                      \
  X(cuMemcpyPeer)                        \
  X(cuMemcpyPeer_ptds)                   \
  X(cuMemcpyPeerAsync)                   \
  X(cuMemcpyPeerAsync_ptsz)              \
  X(cuMemcpy2D_v2)                       \
  X(cuMemcpy2D_v2_ptds)                  \
  X(cuMemcpy2DUnaligned_v2)              \
  X(cuMemcpy2DUnaligned_v2_ptds)         \
  X(cuMemcpy2DAsync_v2)                  \
  X(cuMemcpy2DAsync_v2_ptsz)

namespace ndt::tracer {

enum class Hook : int {
#define NDT_HOOK_ENUM(name) k_##name,
  NDT_HOOKED_DRIVER_FUNCTIONS(NDT_HOOK_ENUM)
#undef NDT_HOOK_ENUM
      kCount
};
inline constexpr int kHookCount = static_cast<int>(Hook::kCount);

// The exported name of each hook, and our wrapper (defined in hooks_driver.cc).
extern const char* const kHookNames[kHookCount];
extern void* const kHookWrappers[kHookCount];

// The real driver function behind `hook`, or null when libcuda.so.1 is not loaded or lacks
// it. Resolves every slot the first time libcuda.so.1 is found loaded.
void* RealDriverFunction(Hook hook);

// The wrapper to hand out in place of `real`, a pointer the real driver returned for a
// function whose name starts with "cu"; `real` itself when we do not hook it. The real
// cuGetProcAddress (either ABI) maps to our own.
void* WrapperForRealPointer(void* real);

// A driver function we call for our own purposes (queries, not recorded), by base name and
// the CUDA version of the ABI we call it with, through the real cuGetProcAddress_v2. Null when
// the driver lacks it. The result is not cached here.
void* DriverProc(const char* base_name, int cuda_version);

// The real cuGetProcAddress_v2 / cuGetProcAddress of libcuda.so.1, or null.
void* RealGetProcAddressV2();
void* RealGetProcAddressV1();

}  // namespace ndt::tracer
