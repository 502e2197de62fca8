// TlsRef: a thread-local's address, computed once.
//
// libndtrace.so's thread-locals use the default (global-dynamic) TLS model: initial-exec would
// put the library's whole TLS block in static TLS and break a dlopen of it without the preload
// (tracer/README.md, "How records reach the file"). Each access is then a call of
// __tls_get_addr, and GCC, taking that call for cheap, makes it again at every use of the
// variable in a function. A function that uses one several times takes TlsRef(variable) once.
#pragma once

namespace ndt::tracer {

template <typename T>
inline T& TlsRef(T& variable) {
  T* address = &variable;
  asm("" : "+r"(address));  // the address is a value from here: not recomputed
  return *address;
}

}  // namespace ndt::tracer
