// A weak definition of every function a real CUDA library exports (standin_<lib>_entry_points.inc,
// from entry_points.sh), returning the library's "not supported" status. Compiled into each
// stand-in library with NDT_STUB_ENTRY_POINTS (the .inc), NDT_STUB_STATUS and
// NDT_STUB_STATUS_NAME (CMakeLists.txt). The strong definitions of the library's implemented
// subset win at link time, so a program built against the real library never fails to load on
// the stand-in: what it calls beyond that subset fails cleanly, and says so once on stderr.
//
// No library header is included: the stubs take no parameters, which would clash with the
// prototypes. Every export the stand-in leaves unimplemented returns its library's status type,
// nothing, a number or a small struct (the legacy BLAS functions, which then return garbage but
// never crash); every export that returns a pointer (the status strings) is implemented.
#include <atomic>
#include <cstdio>

namespace {

int NotImplemented(const char* name, std::atomic<bool>& said) {
  if (!said.exchange(true, std::memory_order_relaxed)) {
    std::fprintf(stderr, "ndtrace stand-in: %s is not implemented; it returns %s\n", name,
                 NDT_STUB_STATUS_NAME);
  }
  return NDT_STUB_STATUS;
}

}  // namespace

#define NDT_ENTRY_POINT(name)                   \
  extern "C" __attribute__((weak)) int name() { \
    static std::atomic<bool> said{false};       \
    return NotImplemented(#name, said);         \
  }
#include NDT_STUB_ENTRY_POINTS
#undef NDT_ENTRY_POINT
