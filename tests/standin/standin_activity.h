// How the stand-in libcupti (standin_cupti.cc) hears of the work the stand-in driver runs, to
// give CUPTI's activity records: the driver exports ndt_standin_set_activity_sink, which the
// stand-in libcupti calls when an activity kind is enabled. Plain C types: the two libraries
// share nothing else.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <exception>
#include <type_traits>

enum NdtStandinActivityKind { kNdtActivityKernel = 0, kNdtActivityMemcpy = 1, kNdtActivityMemset = 2 };

// A copy as CUPTI's memcpy record describes it, in CUPTI's numbering: copy kind
// (CUPTI_ACTIVITY_MEMCPY_KIND_*) | source memory kind << 8 | destination memory kind << 16
// (CUPTI_ACTIVITY_MEMORY_KIND_*).
inline uint32_t NdtStandinCopy(uint32_t copy_kind, uint32_t src_memory, uint32_t dst_memory) {
  return copy_kind | src_memory << 8 | dst_memory << 16;
}

struct NdtStandinActivitySink {
  // On the thread making a driver call that starts GPU work of `kind`: the correlation id the
  // work carries (the driver call's own, or the runtime call's it is made inside).
  uint32_t (*api_call)(int kind);
  // On the thread making a runtime call (standin_runtime.cc, RuntimeCall): 1 when it enters, 0 when
  // it returns (ndt_standin_runtime_call).
  void (*runtime_call)(int entering);
  // When the work has run, on whichever thread ran it (a stream's worker under
  // NDT_STANDIN_ASYNC): times from CLOCK_MONOTONIC, in ns; a kernel's name (null for a copy or
  // a memset), which lives as long as the process; a copy's direction and memory kinds
  // (NdtStandinCopy), 0 for other work.
  void (*ran)(int kind, uint32_t correlation, uint64_t start_ns, uint64_t end_ns, uint32_t stream,
              uint64_t bytes, const char* name, uint32_t copy);
};

// Null stops the reports.
extern "C" void ndt_standin_set_activity_sink(const NdtStandinActivitySink* sink);

// Called by the stand-in runtime around each of its calls that start work (a launch, a copy, a
// memset): passed on to the sink.
extern "C" void ndt_standin_runtime_call(int entering);

// Runs `work(context)` as a kernel on `stream` as far as CUPTI is concerned: for the stand-in
// libraries, whose computations run on the host.
extern "C" void ndt_standin_run_as_kernel(CUstream stream, void (*work)(void*), void* context);

namespace {

// Runs `work` (a stand-in library's computation) as a kernel of the stand-in driver on `stream`,
// so that the stand-in CUPTI reports its time as a real library's kernels would be; just runs it
// when the driver does not offer that.
template <typename Work>
[[maybe_unused]] void AsKernel(void* stream, Work&& work) {
  using Run = void (*)(CUstream, void (*)(void*), void*);
  static const Run run = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    Run found = driver != nullptr
                    ? reinterpret_cast<Run>(dlsym(driver, "ndt_standin_run_as_kernel"))
                    : nullptr;
    if (driver != nullptr) dlclose(driver);
    return found;
  }();
  if (run == nullptr) {
    work();
    return;
  }
  struct Call {
    std::remove_reference_t<Work>* work;
    std::exception_ptr error;
  } call{&work, nullptr};
  run(static_cast<CUstream>(stream),
      [](void* context) {
        auto* c = static_cast<Call*>(context);
        try {
          (*c->work)();
        } catch (...) {
          c->error = std::current_exception();
        }
      },
      &call);
  if (call.error) std::rethrow_exception(call.error);
}

}  // namespace
