// What the two halves of the stand-in libcuda.so.1 share: standin_driver.cc (the implemented
// entry points, cuGetProcAddress) and standin_driver_stubs.cc (a NOT_SUPPORTED definition of
// every other driver entry point).
#pragma once

#include <span>
#include <string_view>

namespace ndt::standin {

// Appends `line` and a newline to the file named by NDT_STANDIN_LOG (read once, at the first
// call), in one write(2) so that lines from several threads or processes never interleave.
// No-op when the variable is unset or empty. Any thread.
void LogDriverCall(std::string_view line);

// One exported driver symbol and its address inside this library.
struct DriverEntryPoint {
  std::string_view name;
  void* address;
};

// Every symbol the real CUDA 13.0 driver exports (standin_driver_entry_points.inc). Implemented
// ones resolve to their implementation, the rest to a stub returning CUDA_ERROR_NOT_SUPPORTED.
std::span<const DriverEntryPoint> AllDriverEntryPoints();

}  // namespace ndt::standin
