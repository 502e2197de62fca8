// What every test program prints: the FNV-1a 64-bit hash of its result bytes, as
// "checksum <16 hex digits>" on stdout. The tests compare these lines between runs, between the
// stand-in device and a GPU, and with expected values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace ndt::programs {

inline std::uint64_t Fnv1a64(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

inline void PrintChecksum(const void* data, std::size_t size) {
  std::printf("checksum %016llx\n", static_cast<unsigned long long>(Fnv1a64(data, size)));
}

}  // namespace ndt::programs
