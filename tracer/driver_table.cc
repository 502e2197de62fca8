#include "tracer/driver_table.h"

// Every driver function declared here is one libndtrace.so may export: default visibility
// (the build hides everything else; libndtrace.map picks the exports).
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <type_traits>

#include "tracer/real_dl.h"

// Our own exported cuGetProcAddress hooks (preload_entry.cc).
extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbol_status);
#undef cuGetProcAddress
extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol,
                                                                            void** pfn,
                                                                            int cuda_version,
                                                                            cuuint64_t flags);

namespace ndt::tracer {
namespace {

struct Table {
  std::atomic<bool> resolved{false};
  std::mutex mutex;  // serialises resolution only
  std::atomic<void*> real[kHookCount] = {};
  std::atomic<void*> get_proc_address_v2{nullptr};
  std::atomic<void*> get_proc_address_v1{nullptr};
};

// Constant-initialised and trivially destructible: ready before any constructor runs, and still
// there while hooks run during exit; no guard to check on each hooked call.
constinit Table g_table;
static_assert(std::is_trivially_destructible_v<Table>);

Table& GetTable() {
  return g_table;
}

bool ResolveSlow();

// Fills the slots once libcuda.so.1 is loaded; returns whether it is.
inline bool Resolve() {
  return g_table.resolved.load(std::memory_order_acquire) || ResolveSlow();
}

bool ResolveSlow() {
  Table& table = GetTable();
  std::lock_guard lock(table.mutex);
  if (table.resolved.load(std::memory_order_relaxed)) return true;
  DlsymFn real_dlsym = RealDlsym();
  if (real_dlsym == nullptr) return false;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  for (int i = 0; i < kHookCount; ++i) {
    table.real[i].store(real_dlsym(handle, kHookNames[i]), std::memory_order_relaxed);
  }
  table.get_proc_address_v2.store(real_dlsym(handle, "cuGetProcAddress_v2"));
  table.get_proc_address_v1.store(real_dlsym(handle, "cuGetProcAddress"));
  table.resolved.store(true, std::memory_order_release);
  return true;
}

}  // namespace

void* RealDriverFunction(Hook hook) {
  if (!Resolve()) return nullptr;
  return GetTable().real[static_cast<int>(hook)].load(std::memory_order_relaxed);
}

void* RealGetProcAddressV2() {
  return Resolve() ? GetTable().get_proc_address_v2.load() : nullptr;
}

void* RealGetProcAddressV1() {
  return Resolve() ? GetTable().get_proc_address_v1.load() : nullptr;
}

void* WrapperForRealPointer(void* real) {
  if (real == nullptr || !Resolve()) return real;
  Table& table = GetTable();
  if (real == table.get_proc_address_v2.load()) {
    return reinterpret_cast<void*>(&cuGetProcAddress_v2);
  }
  if (real == table.get_proc_address_v1.load()) {
    return reinterpret_cast<void*>(&cuGetProcAddress);
  }
  for (int i = 0; i < kHookCount; ++i) {
    if (table.real[i].load(std::memory_order_relaxed) == real) return kHookWrappers[i];
  }
  return real;
}

void* DriverProc(const char* base_name, int cuda_version) {
  using GetProcAddressFn =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc_address = reinterpret_cast<GetProcAddressFn>(RealGetProcAddressV2());
  if (get_proc_address == nullptr) return nullptr;
  void* function = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  if (get_proc_address(base_name, &function, cuda_version, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
      CUDA_SUCCESS) {
    return nullptr;
  }
  return function;
}

}  // namespace ndt::tracer
