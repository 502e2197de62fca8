// Digest v1 on the CPU: a slow transcription of the definition (the reference the tests trust)
// and two fast paths that must agree with it bit for bit.
//
// Cost model. Per 16-byte block each of the two lanes needs one 64x64->128 multiply plus
// about ten simple operations, so even in cache the work is bound by instruction issue, not
// by loads. Measured on the development machine (AMD Zen 3, g++ 12), per block:
//   - portable: ~7 cycles. One block per iteration with running counters (j*K + S advanced
//     by adding K) and unsigned __int128 multiplies. It is ALU-bound, so unrolling into more
//     accumulators does not help (tried: 2 and 4 blocks per iteration were slower with g++).
//   - AVX2: ~3.3 cycles. AVX2 has no 64x64 multiply, so a vector product costs four 32x32
//     multiplies and a dozen shifts and adds; doing both lanes that way (~3.9 cycles) leaves
//     the integer units idle. The AVX2 path therefore splits the work: the vector unit loads
//     four blocks, forms x and y for both lanes, does lane 0's products and both lanes'
//     (a ^ rotl b) terms, and the integer unit does lane 1's four products with MULX.
//     It also prefetches ahead, which matters once the input is in DRAM.
//   - AVX-512 (F + DQ): the same split eight blocks at a time, with one-instruction rotates and
//     the product's low half from a 64x64 multiply. On AMD Zen 4 (3.7 GHz, 512-bit operations
//     executed as two 256-bit halves): ~2.95 cycles against the AVX2 path's ~3.4 there, 1.16x.
//     Putting more of the products on MULX (16 blocks a group, 24 of their 32 products) was
//     slower (0.65x: the loads and the scalar units saturate), both lanes on the vector unit no
//     faster than AVX2 (bench/README.md).
// 3.3 cycles per 16 bytes is ~15 GB/s at 3.1 GHz, against ~50 GB/s for memcpy within L2 on
// the same core: in cache, one core cannot digest at memcpy speed with this definition.
// The portable path handles every input; the AVX-512 path is chosen at run time when the CPU
// has AVX-512 F and DQ, AVX2 and BMI2, else the AVX2 path when it has AVX2 and BMI2; each hands
// the blocks left over from its groups down (AVX-512 to AVX2 to portable).
#include "kernels/digest_v1.h"

#include <bit>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NDT_DIGEST_HAVE_AVX2 1
#else
#define NDT_DIGEST_HAVE_AVX2 0
#endif

namespace ndt::kernels {
namespace {

using u128 = unsigned __int128;

constexpr uint64_t kLane0K = 0x9E3779B97F4A7C15;
constexpr uint64_t kLane0S = 0x243F6A8885A308D3;
constexpr uint64_t kLane0K2 = 0xC2B2AE3D27D4EB4F;
constexpr uint64_t kLane0S2 = 0x13198A2E03707344;
constexpr int kLane0R = 29;
constexpr uint64_t kLane1K = 0x165667B19E3779F9;
constexpr uint64_t kLane1S = 0xA4093822299F31D0;
constexpr uint64_t kLane1K2 = 0xD6E8FEB86659FD93;
constexpr uint64_t kLane1S2 = 0x082EFA98EC4E6C89;
constexpr int kLane1R = 41;

constexpr size_t kBlockBytes = 16;

constexpr uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccd;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53;
  k ^= k >> 33;
  return k;
}

constexpr uint64_t FoldProduct(uint64_t x, uint64_t y) {
  const u128 p = static_cast<u128>(x) * y;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

// Little-endian u64 at p, any alignment, any host byte order.
inline uint64_t LoadLe64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// Sums `blocks` whole blocks at p, numbered from first_block, into acc.
void SumBlocksPortable(const unsigned char* p, size_t blocks, uint64_t first_block,
                       DigestV1Accumulator& acc) {
  uint64_t c0 = first_block * kLane0K + kLane0S;
  uint64_t d0 = first_block * kLane0K2 + kLane0S2;
  uint64_t c1 = first_block * kLane1K + kLane1S;
  uint64_t d1 = first_block * kLane1K2 + kLane1S2;
  uint64_t acc0 = acc.acc0, acc1 = acc.acc1;
  for (size_t i = 0; i < blocks; ++i, p += kBlockBytes) {
    const uint64_t a = LoadLe64(p);
    const uint64_t b = LoadLe64(p + 8);
    acc0 += FoldProduct(a ^ c0, b ^ d0) + (a ^ std::rotl(b, kLane0R));
    acc1 += FoldProduct(a ^ c1, b ^ d1) + (a ^ std::rotl(b, kLane1R));
    c0 += kLane0K;
    d0 += kLane0K2;
    c1 += kLane1K;
    d1 += kLane1K2;
  }
  acc = {acc0, acc1};
}

#if NDT_DIGEST_HAVE_AVX2

#define NDT_TARGET_AVX2 __attribute__((target("avx2,bmi2")))

// How far ahead of the loads the AVX2 loop asks for data. The hardware prefetcher alone
// leaves the loop waiting on DRAM; 2 KiB ahead gained ~15% on buffers far larger than L3.
constexpr size_t kPrefetchBytes = 2048;

// The four fold(x * y) of the u64 lanes of x and y, from 32x32->64 multiplies.
NDT_TARGET_AVX2 inline __m256i FoldProduct4(__m256i x, __m256i y) {
  const __m256i x_hi = _mm256_srli_epi64(x, 32);
  const __m256i y_hi = _mm256_srli_epi64(y, 32);
  const __m256i ll = _mm256_mul_epu32(x, y);
  const __m256i lh = _mm256_mul_epu32(x, y_hi);
  const __m256i hl = _mm256_mul_epu32(x_hi, y);
  const __m256i hh = _mm256_mul_epu32(x_hi, y_hi);
  // Neither sum can carry out of 64 bits: each adds a value < 2^32 to one < 2^64 - 2^33.
  const __m256i mid = _mm256_add_epi64(lh, _mm256_srli_epi64(ll, 32));
  const __m256i mid2 = _mm256_add_epi64(hl, _mm256_and_si256(mid, _mm256_set1_epi64x(0xffffffff)));
  const __m256i hi = _mm256_add_epi64(_mm256_add_epi64(hh, _mm256_srli_epi64(mid, 32)),
                                      _mm256_srli_epi64(mid2, 32));
  const __m256i lo = _mm256_blend_epi32(ll, _mm256_slli_epi64(mid2, 32), 0b10101010);
  return _mm256_xor_si256(lo, hi);
}

template <int R>
NDT_TARGET_AVX2 inline __m256i Rotl4(__m256i v) {
  return _mm256_or_si256(_mm256_slli_epi64(v, R), _mm256_srli_epi64(v, 64 - R));
}

NDT_TARGET_AVX2 inline uint64_t HorizontalSum(__m256i v) {
  const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s)) +
         static_cast<uint64_t>(_mm_extract_epi64(s, 1));
}

NDT_TARGET_AVX2 inline uint64_t FoldProductMulx(uint64_t x, uint64_t y) {
  unsigned long long hi;  // NOLINT(runtime/int): the type _mulx_u64 takes.
  const unsigned long long lo = _mulx_u64(x, y, &hi);  // NOLINT(runtime/int)
  return lo ^ hi;
}

// Counters k*j + s for the blocks j = first, first+2, first+1, first+3: the order in which
// the unpacked vectors below hold a group of four blocks.
NDT_TARGET_AVX2 inline __m256i GroupCounters(uint64_t first, uint64_t k, uint64_t s) {
  const uint64_t c = first * k + s;
  return _mm256_setr_epi64x(static_cast<long long>(c), static_cast<long long>(c + 2 * k),
                            static_cast<long long>(c + k), static_cast<long long>(c + 3 * k));
}

// As SumBlocksPortable; little-endian host (x86-64).
NDT_TARGET_AVX2 void SumBlocksAvx2(const unsigned char* p, size_t blocks, uint64_t first_block,
                                   DigestV1Accumulator& acc) {
  __m256i c0 = GroupCounters(first_block, kLane0K, kLane0S);
  __m256i d0 = GroupCounters(first_block, kLane0K2, kLane0S2);
  __m256i c1 = GroupCounters(first_block, kLane1K, kLane1S);
  __m256i d1 = GroupCounters(first_block, kLane1K2, kLane1S2);
  const __m256i step_c0 = _mm256_set1_epi64x(static_cast<long long>(4 * kLane0K));
  const __m256i step_d0 = _mm256_set1_epi64x(static_cast<long long>(4 * kLane0K2));
  const __m256i step_c1 = _mm256_set1_epi64x(static_cast<long long>(4 * kLane1K));
  const __m256i step_d1 = _mm256_set1_epi64x(static_cast<long long>(4 * kLane1K2));
  __m256i sum0 = _mm256_setzero_si256();
  __m256i rot_sum0 = _mm256_setzero_si256();
  __m256i rot_sum1 = _mm256_setzero_si256();
  uint64_t sum1_even = 0, sum1_odd = 0;
  alignas(32) uint64_t x1[4], y1[4];
  const size_t groups = blocks / 4;
  for (size_t g = 0; g < groups; ++g, p += 4 * kBlockBytes) {
    // A hint only: it never faults, so running past the end of the input is harmless.
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kPrefetchBytes),
                 _MM_HINT_T0);
    // v01 = a0 b0 a1 b1, v23 = a2 b2 a3 b3  ->  a = a0 a2 a1 a3, b = b0 b2 b1 b3.
    const __m256i v01 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i v23 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    const __m256i a = _mm256_unpacklo_epi64(v01, v23);
    const __m256i b = _mm256_unpackhi_epi64(v01, v23);
    _mm256_store_si256(reinterpret_cast<__m256i*>(x1), _mm256_xor_si256(a, c1));
    _mm256_store_si256(reinterpret_cast<__m256i*>(y1), _mm256_xor_si256(b, d1));
    sum0 = _mm256_add_epi64(sum0, FoldProduct4(_mm256_xor_si256(a, c0), _mm256_xor_si256(b, d0)));
    rot_sum0 = _mm256_add_epi64(rot_sum0, _mm256_xor_si256(a, Rotl4<kLane0R>(b)));
    rot_sum1 = _mm256_add_epi64(rot_sum1, _mm256_xor_si256(a, Rotl4<kLane1R>(b)));
    c0 = _mm256_add_epi64(c0, step_c0);
    d0 = _mm256_add_epi64(d0, step_d0);
    c1 = _mm256_add_epi64(c1, step_c1);
    d1 = _mm256_add_epi64(d1, step_d1);
    sum1_even += FoldProductMulx(x1[0], y1[0]);
    sum1_odd += FoldProductMulx(x1[1], y1[1]);
    sum1_even += FoldProductMulx(x1[2], y1[2]);
    sum1_odd += FoldProductMulx(x1[3], y1[3]);
  }
  acc.acc0 += HorizontalSum(_mm256_add_epi64(sum0, rot_sum0));
  acc.acc1 += HorizontalSum(rot_sum1) + sum1_even + sum1_odd;
  SumBlocksPortable(p, blocks % 4, first_block + 4 * groups, acc);
}

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
  return has;
}

#define NDT_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx2,bmi2")))

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which -W[maybe-]uninitialized
// reports (a false positive) wherever they are inlined.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The eight fold(x * y) of the u64 lanes of x and y: the high halves from 32x32->64 multiplies
// as in FoldProduct4, the low halves from one 64x64 multiply (AVX512DQ).
NDT_TARGET_AVX512 inline __m512i FoldProduct8(__m512i x, __m512i y) {
  const __m512i x_hi = _mm512_srli_epi64(x, 32);
  const __m512i y_hi = _mm512_srli_epi64(y, 32);
  const __m512i ll = _mm512_mul_epu32(x, y);
  const __m512i lh = _mm512_mul_epu32(x, y_hi);
  const __m512i hl = _mm512_mul_epu32(x_hi, y);
  const __m512i hh = _mm512_mul_epu32(x_hi, y_hi);
  // As in FoldProduct4, neither sum can carry out of 64 bits.
  const __m512i mid = _mm512_add_epi64(lh, _mm512_srli_epi64(ll, 32));
  const __m512i mid2 = _mm512_add_epi64(hl, _mm512_and_si512(mid, _mm512_set1_epi64(0xffffffff)));
  const __m512i hi = _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(mid, 32)),
                                      _mm512_srli_epi64(mid2, 32));
  return _mm512_xor_si512(_mm512_mullo_epi64(x, y), hi);
}

// Counters k*j + s for the blocks j = first + 0, 4, 1, 5, 2, 6, 3, 7: the order in which the
// unpacked vectors below hold a group of eight blocks.
NDT_TARGET_AVX512 inline __m512i GroupCounters8(uint64_t first, uint64_t k, uint64_t s) {
  const uint64_t c = first * k + s;
  return _mm512_setr_epi64(static_cast<long long>(c), static_cast<long long>(c + 4 * k),
                           static_cast<long long>(c + k), static_cast<long long>(c + 5 * k),
                           static_cast<long long>(c + 2 * k), static_cast<long long>(c + 6 * k),
                           static_cast<long long>(c + 3 * k), static_cast<long long>(c + 7 * k));
}

// As SumBlocksAvx2, eight blocks at a time in 512-bit vectors (lane 0's products and both
// lanes' rotate terms on the vector unit, lane 1's products with MULX); the last < 8 blocks go
// to SumBlocksAvx2.
NDT_TARGET_AVX512 void SumBlocksAvx512(const unsigned char* p, size_t blocks, uint64_t first_block,
                                       DigestV1Accumulator& acc) {
  __m512i c0 = GroupCounters8(first_block, kLane0K, kLane0S);
  __m512i d0 = GroupCounters8(first_block, kLane0K2, kLane0S2);
  __m512i c1 = GroupCounters8(first_block, kLane1K, kLane1S);
  __m512i d1 = GroupCounters8(first_block, kLane1K2, kLane1S2);
  const __m512i step_c0 = _mm512_set1_epi64(static_cast<long long>(8 * kLane0K));
  const __m512i step_d0 = _mm512_set1_epi64(static_cast<long long>(8 * kLane0K2));
  const __m512i step_c1 = _mm512_set1_epi64(static_cast<long long>(8 * kLane1K));
  const __m512i step_d1 = _mm512_set1_epi64(static_cast<long long>(8 * kLane1K2));
  __m512i sum0 = _mm512_setzero_si512();
  __m512i rot_sum0 = _mm512_setzero_si512();
  __m512i rot_sum1 = _mm512_setzero_si512();
  uint64_t sum1_even = 0, sum1_odd = 0;
  alignas(64) uint64_t x1[8], y1[8];
  const size_t groups = blocks / 8;
  for (size_t g = 0; g < groups; ++g, p += 8 * kBlockBytes) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + kPrefetchBytes),
                 _MM_HINT_T0);
    // v0 = a0 b0 a1 b1 a2 b2 a3 b3, v1 = a4 b4 ... a7 b7  ->  a = a0 a4 a1 a5 a2 a6 a3 a7, b alike.
    const __m512i v0 = _mm512_loadu_si512(p);
    const __m512i v1 = _mm512_loadu_si512(p + 64);
    const __m512i a = _mm512_unpacklo_epi64(v0, v1);
    const __m512i b = _mm512_unpackhi_epi64(v0, v1);
    _mm512_store_si512(x1, _mm512_xor_si512(a, c1));
    _mm512_store_si512(y1, _mm512_xor_si512(b, d1));
    sum0 = _mm512_add_epi64(sum0, FoldProduct8(_mm512_xor_si512(a, c0), _mm512_xor_si512(b, d0)));
    rot_sum0 = _mm512_add_epi64(rot_sum0, _mm512_xor_si512(a, _mm512_rol_epi64(b, kLane0R)));
    rot_sum1 = _mm512_add_epi64(rot_sum1, _mm512_xor_si512(a, _mm512_rol_epi64(b, kLane1R)));
    c0 = _mm512_add_epi64(c0, step_c0);
    d0 = _mm512_add_epi64(d0, step_d0);
    c1 = _mm512_add_epi64(c1, step_c1);
    d1 = _mm512_add_epi64(d1, step_d1);
    for (int i = 0; i < 8; i += 2) {
      sum1_even += FoldProductMulx(x1[i], y1[i]);
      sum1_odd += FoldProductMulx(x1[i + 1], y1[i + 1]);
    }
  }
  acc.acc0 += static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(sum0, rot_sum0)));
  acc.acc1 += static_cast<uint64_t>(_mm512_reduce_add_epi64(rot_sum1)) + sum1_even + sum1_odd;
  SumBlocksAvx2(p, blocks % 8, first_block + 8 * groups, acc);
}

#pragma GCC diagnostic pop

bool CpuHasAvx512() {
  static const bool has =
      CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return has;
}

#endif  // NDT_DIGEST_HAVE_AVX2

using SumBlocksFn = void (*)(const unsigned char*, size_t, uint64_t, DigestV1Accumulator&);

SumBlocksFn SumBlocksFor(internal::DigestV1Path path) {
  switch (path) {
    case internal::DigestV1Path::kPortable:
      return SumBlocksPortable;
    case internal::DigestV1Path::kAvx2:
#if NDT_DIGEST_HAVE_AVX2
      if (CpuHasAvx2()) return SumBlocksAvx2;
#endif
      return nullptr;
    case internal::DigestV1Path::kAvx512:
#if NDT_DIGEST_HAVE_AVX2
      if (CpuHasAvx512()) return SumBlocksAvx512;
#endif
      return nullptr;
  }
  return nullptr;
}

internal::DigestV1Path BestPath() {
  using internal::DigestV1Path;
  if (SumBlocksFor(DigestV1Path::kAvx512)) return DigestV1Path::kAvx512;
  return SumBlocksFor(DigestV1Path::kAvx2) ? DigestV1Path::kAvx2 : DigestV1Path::kPortable;
}

DigestV1Accumulator PartialWith(SumBlocksFn sum_blocks, const void* data, size_t n,
                                uint64_t first_block) {
  const auto* p = static_cast<const unsigned char*>(data);
  DigestV1Accumulator acc;
  const size_t whole = n / kBlockBytes;
  if (whole != 0) sum_blocks(p, whole, first_block, acc);
  if (const size_t tail = n % kBlockBytes; tail != 0) {
    unsigned char last[kBlockBytes] = {};
    std::memcpy(last, p + whole * kBlockBytes, tail);
    SumBlocksPortable(last, 1, first_block + whole, acc);
  }
  return acc;
}

}  // namespace

std::string ToHex(Digest128 digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(digest.lo >> (4 * i)) & 0xf];
    out[31 - i] = kDigits[(digest.hi >> (4 * i)) & 0xf];
  }
  return out;
}

DigestV1Accumulator DigestV1Partial(const void* data, size_t n, uint64_t first_block) {
  static const SumBlocksFn sum_blocks = SumBlocksFor(BestPath());
  return PartialWith(sum_blocks, data, n, first_block);
}

Digest128 DigestV1Finish(DigestV1Accumulator acc, uint64_t total_bytes) {
  return {Fmix64(acc.acc0 ^ Fmix64(total_bytes + kLane0S)),
          Fmix64(acc.acc1 ^ Fmix64(total_bytes + kLane1S))};
}

Digest128 DigestV1(const void* data, size_t n) {
  return DigestV1Finish(DigestV1Partial(data, n, 0), n);
}

namespace internal {

bool DigestV1PathAvailable(DigestV1Path path) { return SumBlocksFor(path) != nullptr; }

DigestV1Path DigestV1DefaultPath() { return BestPath(); }

DigestV1Accumulator DigestV1PartialOn(DigestV1Path path, const void* data, size_t n,
                                      uint64_t first_block) {
  const SumBlocksFn sum_blocks = SumBlocksFor(path);
  if (sum_blocks == nullptr) __builtin_trap();  // The caller must check availability first.
  return PartialWith(sum_blocks, data, n, first_block);
}

Digest128 DigestV1Slow(const void* data, size_t n) {
  static constexpr struct {
    uint64_t k, s, k2, s2;
    int r;
  } kLanes[2] = {{kLane0K, kLane0S, kLane0K2, kLane0S2, kLane0R},
                 {kLane1K, kLane1S, kLane1K2, kLane1S2, kLane1R}};
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t acc[2] = {0, 0};
  const uint64_t m = (n + kBlockBytes - 1) / kBlockBytes;
  for (uint64_t j = 0; j < m; ++j) {
    unsigned char block[kBlockBytes] = {};
    for (size_t i = 0; i < kBlockBytes && j * kBlockBytes + i < n; ++i) {
      block[i] = bytes[j * kBlockBytes + i];
    }
    uint64_t a = 0, b = 0;
    for (int i = 7; i >= 0; --i) {
      a = (a << 8) | block[i];
      b = (b << 8) | block[8 + i];
    }
    for (int lane = 0; lane < 2; ++lane) {
      const auto& c = kLanes[lane];
      const uint64_t x = a ^ (j * c.k + c.s);
      const uint64_t y = b ^ (j * c.k2 + c.s2);
      const u128 product = static_cast<u128>(x) * y;
      const uint64_t fold = static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
      const uint64_t rot = (b << c.r) | (b >> (64 - c.r));
      acc[lane] += fold + (a ^ rot);
    }
  }
  uint64_t digest[2];
  for (int lane = 0; lane < 2; ++lane) {
    digest[lane] = Fmix64(acc[lane] ^ Fmix64(n + kLanes[lane].s));
  }
  return {digest[0], digest[1]};
}

}  // namespace internal

}  // namespace ndt::kernels
