// Digest v1, one block at a time, for code compiled by both the host compiler and nvcc: the GPU
// kernel (digest_v1.cu) and the host emulation of its decomposition that the tests check
// against the CPU reference (digest_v1.cc). The definition is in formats/README.md; the
// constants here must stay equal to digest_v1.cc's (tests/unit/digest_v1_gpu_test.cc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NDT_DIGEST_HD __host__ __device__ __forceinline__
#else
#define NDT_DIGEST_HD inline
#endif

namespace ndt::kernels::digest_v1 {

// Per lane (0 or 1): K, S, K2, S2, R (formats/README.md, "Digest v1"). Functions rather than
// arrays, so that device code can use them without relaxed-constexpr.
NDT_DIGEST_HD uint64_t K(int lane) {
  return lane == 0 ? 0x9E3779B97F4A7C15ull : 0x165667B19E3779F9ull;
}
NDT_DIGEST_HD uint64_t S(int lane) {
  return lane == 0 ? 0x243F6A8885A308D3ull : 0xA4093822299F31D0ull;
}
NDT_DIGEST_HD uint64_t K2(int lane) {
  return lane == 0 ? 0xC2B2AE3D27D4EB4Full : 0xD6E8FEB86659FD93ull;
}
NDT_DIGEST_HD uint64_t S2(int lane) {
  return lane == 0 ? 0x13198A2E03707344ull : 0x082EFA98EC4E6C89ull;
}
NDT_DIGEST_HD int R(int lane) {
  return lane == 0 ? 29 : 41;
}

NDT_DIGEST_HD uint64_t Rotl64(uint64_t v, int r) {
  return (v << r) | (v >> (64 - r));
}

// lo64(x*y) ^ hi64(x*y) of the full 128-bit product.
NDT_DIGEST_HD uint64_t FoldProduct(uint64_t x, uint64_t y) {
#if defined(__CUDA_ARCH__)
  return (x * y) ^ __umul64hi(x, y);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(x) * y;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}

// Lane `lane`'s term for block j with words a (bytes 16j..16j+7) and b (16j+8..16j+15).
NDT_DIGEST_HD uint64_t Term(int lane, uint64_t a, uint64_t b, uint64_t j) {
  const uint64_t x = a ^ (j * K(lane) + S(lane));
  const uint64_t y = b ^ (j * K2(lane) + S2(lane));
  return FoldProduct(x, y) + (a ^ Rotl64(b, R(lane)));
}

NDT_DIGEST_HD uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// The digest lane `lane` of an input of `bytes` bytes whose terms sum to `acc`.
NDT_DIGEST_HD uint64_t Finish(int lane, uint64_t acc, uint64_t bytes) {
  return Fmix64(acc ^ Fmix64(bytes + S(lane)));
}

// Words a and b of block j of the `bytes` bytes at `data` (little-endian; the last block
// zero-padded), read byte by byte: any alignment, never past the end.
NDT_DIGEST_HD void LoadBlockBytes(const unsigned char* data, uint64_t bytes, uint64_t j,
                                  uint64_t* a, uint64_t* b) {
  uint64_t words[2] = {0, 0};
  const uint64_t start = 16 * j;
  for (int i = 0; i < 16 && start + i < bytes; ++i) {
    words[i / 8] |= static_cast<uint64_t>(data[start + i]) << (8 * (i % 8));
  }
  *a = words[0];
  *b = words[1];
}

// The f32 summary the digest kernel can take alongside a digest: over the floats lying wholly
// inside the bytes, how many are NaN and infinite, and the least, greatest and sum (in double) of
// the finite ones. Min and max travel as order keys: unsigned comparison of keys orders the floats
// (-0 before +0), so atomicMin/atomicMax on them give the same result in any order.
NDT_DIGEST_HD uint32_t F32Key(uint32_t bits) {
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
NDT_DIGEST_HD uint32_t F32FromKey(uint32_t key) {
  return (key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key;
}
// 0 finite, 1 NaN, 2 infinite.
NDT_DIGEST_HD int F32Class(uint32_t bits) {
  if ((bits & 0x7f800000u) != 0x7f800000u) return 0;
  return (bits & 0x007fffffu) != 0 ? 1 : 2;
}

// The float whose bits are `bits`, and the one whose order key is `key`.
NDT_DIGEST_HD float F32Value(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
#endif
}
NDT_DIGEST_HD float F32FromKeyValue(uint32_t key) {
  return F32Value(F32FromKey(key));
}

// The f32 summary of some floats: what one GPU thread, warp or CTA has seen, or a whole buffer
// on the host (the CPU path, the stand-in's kernel, the checks). Add() in element order gives
// the host's sum; the GPU adds its shares in its own fixed order. No initialisers (the kernel
// keeps some in shared memory): Empty() makes one. No finite value seen: max_key 0.
struct F32Summary {
  uint64_t nan;
  uint64_t inf;
  uint32_t min_key;
  uint32_t max_key;
  double sum;

  static NDT_DIGEST_HD F32Summary Empty() { return {0, 0, 0xffffffffu, 0, 0.0}; }

  NDT_DIGEST_HD void Add(uint32_t bits) {
    const int kind = F32Class(bits);
    if (kind == 1) {
      ++nan;
    } else if (kind == 2) {
      ++inf;
    } else {
      const uint32_t key = F32Key(bits);
      min_key = key < min_key ? key : min_key;
      max_key = key > max_key ? key : max_key;
      sum += static_cast<double>(F32Value(bits));
    }
  }

  // `other`'s share after this one's.
  NDT_DIGEST_HD void Merge(const F32Summary& other) {
    nan += other.nan;
    inf += other.inf;
    min_key = other.min_key < min_key ? other.min_key : min_key;
    max_key = other.max_key > max_key ? other.max_key : max_key;
    sum += other.sum;
  }
};

// Layout of the 8 words the digest kernel writes per digest (`out`), and of the 8 words of
// scratch it uses (`scratch`, zero between digests: the kernel leaves them zero again).
// out: lo, hi, sum (double bits), min key | max key << 32, NaN count, infinite count, 1 when
// summarised, ticket (last, after a system-wide fence).
inline constexpr int kOutWords = 8;
inline constexpr int kOutTicket = 7;
// scratch: two digest sums, CTAs done, NaN count, infinite count, ~min key | max key << 32.
inline constexpr int kScratchWords = 8;
// The most CTAs a digest launch may have: the summary's per-CTA partial sums have this many
// doubles.
inline constexpr unsigned kMaxGrid = 1056;

}  // namespace ndt::kernels::digest_v1
