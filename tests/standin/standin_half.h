// IEEE half (binary16) and bfloat16 as 16-bit words, converted to and from float with rounding to
// nearest even: the element types of the stand-in's mixed-precision GEMMs (cuBLAS) and
// reductions (NCCL), which compute in float and round back as the real kernels do.
#pragma once

#include <bit>
#include <cstdint>

namespace ndt::standin {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float ToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    exponent = 1;  // subnormal: normalise
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

template <typename T>
T FromFloat(float value);

template <>
inline Half FromFloat<Half>(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (magnitude >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // to infinity
  if (magnitude < 0x33000001u) return {sign};                                    // rounds to zero
  const int exponent = static_cast<int>(magnitude >> 23) - 112;
  uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const int shift = exponent > 0 ? 13 : 14 - exponent;  // subnormals lose more bits
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half_way = 1u << (shift - 1);
  mantissa >>= shift;
  if (rest > half_way || (rest == half_way && (mantissa & 1u) != 0)) ++mantissa;
  const uint32_t out = exponent > 0 ? ((static_cast<uint32_t>(exponent) << 10) + mantissa - 0x400u)
                                    : mantissa;  // a carry out of the mantissa bumps the exponent
  return {static_cast<uint16_t>(sign | out)};
}

inline float ToFloat(BFloat16 b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16);
}

template <>
inline BFloat16 FromFloat<BFloat16>(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((bits >> 16) | 0x40u)};
  return {static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}

}  // namespace ndt::standin
