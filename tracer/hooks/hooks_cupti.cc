// CUPTI as the traced program uses it. A profiler in the program (torch.profiler's Kineto)
// registers CUPTI activity buffers of its own; CUPTI keeps one pair of buffer callbacks per
// process, so ndtrace's GPU time steps aside first (gpu_time::YieldToProgram), and the program's
// profiler sees what it would without ndtrace. ndtrace's own CUPTI calls go to the libcupti it
// loaded, never through here.
#include <cupti.h>
#include <dlfcn.h>

#include "tracer/gpu_time.h"
#include "tracer/library_support.h"
#include "tracer/real_dl.h"

extern "C" __attribute__((visibility("default"))) CUptiResult cuptiActivityRegisterCallbacks(
    CUpti_BuffersCallbackRequestFunc request, CUpti_BuffersCallbackCompleteFunc complete) {
  using Register =
      CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  // The loaded libcupti by its soname: the program's may be in no global scope (PyTorch's, which
  // Python loads with dlopen(RTLD_LOCAL)), where RTLD_NEXT does not look (on an H200 the call
  // failed so, and torch.profiler counted no kernel under ndtrace).
  auto real = reinterpret_cast<Register>(
      ndt::tracer::RealLibraryFunction("libcupti.so.13", "cuptiActivityRegisterCallbacks"));
  if (real == nullptr) {
    real = reinterpret_cast<Register>(
        ndt::tracer::RealDlsym()(RTLD_NEXT, "cuptiActivityRegisterCallbacks"));
  }
  if (real == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  ndt::tracer::gpu_time::YieldToProgram(
      "the program registered CUPTI activity buffers of its own (a profiler, such as "
      "torch.profiler with CUDA activities), and CUPTI serves one client");
  return real(request, complete);
}

// The Python shim, as the program's PyTorch profiler prepares CUDA activities: a PyTorch that
// links CUPTI statically registers without coming through here.
extern "C" __attribute__((visibility("default"))) void ndtrace_cupti_yield() {
  ndt::tracer::gpu_time::YieldToProgram(
      "the program's PyTorch profiler is starting with CUDA activities, which it takes from "
      "CUPTI");
}
