// A GPU-style float (and double) atomicAdd for the stand-in's racing kernels and library
// algorithms: the addition is atomic (a compare-and-swap loop on the float's bits), the order of
// additions is whatever the race decides, so float results genuinely vary from run to run.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <type_traits>

namespace ndt::standin {

// A float or double atomicAdd: a compare-and-swap loop on the value's bits.
template <typename T>
inline void AtomicAdd(T* cell, T value) {
  using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  static_assert(sizeof(Bits) == sizeof(T));
  std::atomic_ref<Bits> bits(*reinterpret_cast<Bits*>(cell));
  Bits expected = bits.load(std::memory_order_relaxed);
  while (!bits.compare_exchange_weak(expected,
                                     std::bit_cast<Bits>(std::bit_cast<T>(expected) + value),
                                     std::memory_order_relaxed)) {
  }
}

inline void AtomicAddFloat(float* cell, float value) {
  AtomicAdd(cell, value);
}

}  // namespace ndt::standin
