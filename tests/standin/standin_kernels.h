// Host implementations of the test kernels, looked up by mangled device name.
//
// The stand-in driver never executes device code. When a module or library is loaded it keeps
// the image bytes, and when a kernel is looked up by name (cuModuleGetFunction,
// cuLibraryGetKernel) it finds the host implementation registered here under the same mangled
// name. A launch runs that implementation on the CPU with the launch geometry and the
// kernelParams array, exactly as cuLaunchKernel received them.
//
// Only the stand-in driver (standin_driver.cc) uses this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace ndt::standin {

struct Dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
};

// The geometry of one launch, as passed to cuLaunchKernel.
struct LaunchGeometry {
  Dim3 grid;
  Dim3 block;
  unsigned shared_mem_bytes = 0;
};

// True when [address, address + bytes) lies inside one live device allocation. Supplied by the
// driver, which owns the allocation table; safe to call from any thread.
using DeviceRangeCheck = bool (*)(std::uintptr_t address, std::size_t bytes);

// The arguments of one launch: kernelParams[i] points at the host copy of argument i.
class KernelArgs {
 public:
  KernelArgs(void* const* params, DeviceRangeCheck check) : params_(params), check_(check) {}

  // The value of argument `index`, copied out (arguments need not be aligned for T).
  template <typename T>
  T Value(std::size_t index) const {
    T value;
    std::memcpy(&value, params_[index], sizeof(T));
    return value;
  }

  // Argument `index` read as a device pointer to `count` elements of T. Null when the range is
  // not inside one live allocation: the kernel must then stop and report an illegal address.
  // A count of 0 yields a non-null pointer only if the argument is a valid device address.
  template <typename T>
  T* DeviceArray(std::size_t index, std::size_t count) const {
    const auto address = Value<std::uintptr_t>(index);
    const std::size_t bytes = count * sizeof(T);
    if (address == 0 || !check_(address, bytes == 0 ? 1 : bytes)) return nullptr;
    return reinterpret_cast<T*>(address);
  }

  // A device pointer the kernel read from device memory, to `count` elements of T: null unless
  // the range lies inside one live allocation, as DeviceArray.
  template <typename T>
  T* DevicePointer(T* address, std::size_t count) const {
    const auto raw = reinterpret_cast<std::uintptr_t>(address);
    if (raw == 0 || !check_(raw, count == 0 ? 1 : count * sizeof(T))) return nullptr;
    return address;
  }

 private:
  void* const* params_;
  DeviceRangeCheck check_;
};

// Where argument i lives in the kernel's parameter buffer, as cuFuncGetParamInfo reports it.
struct ParamSlot {
  std::size_t offset;
  std::size_t size;
};

// Runs one launch on the calling thread (it may start its own threads and join them before it
// returns). Returns false if the kernel would have touched memory outside every allocation;
// the driver then reports CUDA_ERROR_ILLEGAL_ADDRESS.
using HostKernelFn = bool (*)(const LaunchGeometry& geometry, const KernelArgs& args);

struct HostKernel {
  std::string_view mangled_name;
  std::span<const ParamSlot> params;
  HostKernelFn run;
};

// The host implementation registered under `mangled_name`, or null.
const HostKernel* FindHostKernel(std::string_view mangled_name);

// Every registered host kernel, in registration order.
std::span<const HostKernel> AllHostKernels();

}  // namespace ndt::standin
