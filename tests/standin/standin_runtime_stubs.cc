// A weak definition of every function the real libcudart.so.13 exports, returning
// cudaErrorNotSupported (and recording it for cudaGetLastError). The strong definitions in
// standin_runtime.cc win at link time, so a program built against the real runtime never fails
// to load on the stand-in: what it calls beyond the implemented subset fails cleanly instead.
//
// No CUDA header is included: the stubs take no parameters, which would clash with the
// prototypes. Every unimplemented export returns cudaError_t or nothing, except
// cudaCreateChannelDesc (a struct), which standin_runtime.cc therefore implements.
namespace ndt::standin {

// Defined in standin_runtime.cc: records cudaErrorNotSupported as the calling thread's last
// error and returns it.
int RuntimeCallNotSupported();

}  // namespace ndt::standin

#define NDT_RUNTIME_ENTRY_POINT(name)               \
  extern "C" __attribute__((weak)) int name() {     \
    return ndt::standin::RuntimeCallNotSupported(); \
  }
#include "standin_runtime_entry_points.inc"
#undef NDT_RUNTIME_ENTRY_POINT
