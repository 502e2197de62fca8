// A weak definition of every entry point the real driver exports, returning
// CUDA_ERROR_NOT_SUPPORTED. The strong definitions in standin_driver.cc win at link time, so
// what stays weak is exactly what the stand-in does not implement: a caller that reaches it
// (through dlsym, cuGetProcAddress or a direct link) gets a clean error, never a missing symbol
// or a crash.
//
// This file deliberately does not include <cuda.h>: the stubs take no parameters (under the
// x86-64 and AArch64 C calling conventions a callee may ignore its arguments), which would clash
// with the header's prototypes.
#include <cstdio>

#include "standin_driver_internal.h"

namespace {

constexpr int kCudaErrorNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED in cuda.h

int NotSupported(const char* name) {
  char line[160];
  std::snprintf(line, sizeof(line), "%s -> not supported", name);
  ndt::standin::LogDriverCall(line);
  return kCudaErrorNotSupported;
}

}  // namespace

#define NDT_DRIVER_ENTRY_POINT(name)            \
  extern "C" __attribute__((weak)) int name() { \
    return NotSupported(#name);                 \
  }
#include "standin_driver_entry_points.inc"
#undef NDT_DRIVER_ENTRY_POINT

namespace ndt::standin {
namespace {

const DriverEntryPoint kDriverEntryPoints[] = {
#define NDT_DRIVER_ENTRY_POINT(name) {#name, reinterpret_cast<void*>(&name)},
#include "standin_driver_entry_points.inc"
#undef NDT_DRIVER_ENTRY_POINT
};

}  // namespace

std::span<const DriverEntryPoint> AllDriverEntryPoints() {
  return kDriverEntryPoints;
}

}  // namespace ndt::standin
