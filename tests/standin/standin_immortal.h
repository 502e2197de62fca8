// Immortal<T>: a T constructed in place and never destroyed.
//
// The stand-in libraries keep their state in function-local Immortal objects. Programs built by
// nvcc unregister their fat binaries from atexit handlers, which can run after the static
// destructors of a library that was dlopen'ed later (libcuda.so.1 is loaded on first use), so
// that state must outlive every static destructor. The real driver and runtime behave the same
// way: they are not torn down at exit.
#pragma once

#include <new>
#include <utility>

namespace ndt::standin {

template <typename T>
class Immortal {
 public:
  template <typename... Args>
  explicit Immortal(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  Immortal(const Immortal&) = delete;
  Immortal& operator=(const Immortal&) = delete;

  T& operator*() { return *std::launder(reinterpret_cast<T*>(storage_)); }
  T* operator->() { return &**this; }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace ndt::standin
