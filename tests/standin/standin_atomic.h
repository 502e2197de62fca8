// A GPU-style float atomicAdd for the stand-in's racing kernels and library algorithms: the
// addition is atomic (a compare-and-swap loop on the float's bits), the order of additions is
// whatever the race decides, so float results genuinely vary from run to run.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

namespace ndt::standin {

inline void AtomicAddFloat(float* cell, float value) {
  std::atomic_ref<std::uint32_t> bits(*reinterpret_cast<std::uint32_t*>(cell));
  std::uint32_t expected = bits.load(std::memory_order_relaxed);
  while (!bits.compare_exchange_weak(
      expected, std::bit_cast<std::uint32_t>(std::bit_cast<float>(expected) + value),
      std::memory_order_relaxed)) {
  }
}

}  // namespace ndt::standin
