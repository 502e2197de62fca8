// Little-endian loads and stores for the container's fixed-layout fields. Internal to
// formats/. Unaligned access is fine: everything goes through memcpy.
#pragma once

#include <cstdint>
#include <cstring>

namespace ndt::format {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ndtrace assumes a little-endian host");

template <typename T>
inline T LoadLe(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}
template <typename T>
inline void StoreLe(char* p, T value) {
  std::memcpy(p, &value, sizeof value);
}
inline uint16_t LoadLe16(const char* p) { return LoadLe<uint16_t>(p); }
inline uint32_t LoadLe32(const char* p) { return LoadLe<uint32_t>(p); }
inline uint64_t LoadLe64(const char* p) { return LoadLe<uint64_t>(p); }
inline void StoreLe16(char* p, uint16_t v) { StoreLe(p, v); }
inline void StoreLe32(char* p, uint32_t v) { StoreLe(p, v); }
inline void StoreLe64(char* p, uint64_t v) { StoreLe(p, v); }

}  // namespace ndt::format
