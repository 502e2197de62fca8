// Digest v1: the 128-bit content digest ndtrace records for GPU buffers and compares between
// runs. This is the CPU reference; the GPU kernel (later) must produce the same bits.
//
// Definition (formats/README.md holds the normative copy). Input bytes B[0..n) are cut into
// m = ceil(n/16) blocks of 16 bytes, the last one zero-padded. For block j, a_j and b_j are
// the little-endian u64s at bytes [16j, 16j+8) and [16j+8, 16j+16). Arithmetic is mod 2^64;
// fold(p) = lo64(p) ^ hi64(p) of a full 128-bit product. Each of two lanes L (constants K, S,
// K2, S2, R in digest_v1.cc) sums over j
//   t = fold((a_j ^ (j*K + S)) * (b_j ^ (j*K2 + S2))) + (a_j ^ rotl64(b_j, R))
// into acc_L and finishes with digest_L = fmix64(acc_L ^ fmix64(n + S)), fmix64 being the
// MurmurHash3 finaliser. The digest is (lo = digest_0, hi = digest_1).
//
// Because acc_L is a plain sum of per-block terms, any split of the blocks into parts,
// hashed in any order or in parallel, adds up to the same accumulator (DigestV1Partial).
//
// All functions are pure and thread-safe; none allocates except ToHex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ndt::kernels {

// The GPU kernels' names begin so (digest_v1.cu): a profiler's record of one is ndtrace's own
// work.
inline constexpr char kDigestKernelPrefix[] = "ndt_digest_";

// A 128-bit digest. lo is lane 0, hi is lane 1.
struct Digest128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Digest128&, const Digest128&) = default;
};

// The digest's text form: 32 lowercase hex characters, lo as 16 digits then hi as 16 digits.
std::string ToHex(Digest128 digest);

// The digest v1 of the n bytes at data. data may have any alignment; it may be null only when
// n is 0. Single-threaded; about 15 GB/s on a 3 GHz core with AVX2 (bench/bench_digest.cc).
Digest128 DigestV1(const void* data, size_t n);

// The two lane sums of a run of blocks, before finishing. Value-initialised ({0, 0}) is the
// sum of no blocks and the identity of DigestV1Add.
struct DigestV1Accumulator {
  uint64_t acc0 = 0;
  uint64_t acc1 = 0;
  friend bool operator==(const DigestV1Accumulator&, const DigestV1Accumulator&) = default;
};

// Sums the blocks of the n bytes at data as blocks first_block, first_block + 1, ... of the
// whole input, i.e. data starts at byte 16 * first_block of it. n must be a multiple of 16
// unless this is the final part of the input, whose last block is zero-padded (so a part that
// ends mid-block must be the last one). Parts may be hashed in any order and on any thread;
// DigestV1Add them and DigestV1Finish the total. Any alignment; data may be null if n is 0.
DigestV1Accumulator DigestV1Partial(const void* data, size_t n, uint64_t first_block);

// The sum of two accumulators of disjoint block ranges. Commutative and associative.
constexpr DigestV1Accumulator DigestV1Add(DigestV1Accumulator x, DigestV1Accumulator y) {
  return {x.acc0 + y.acc0, x.acc1 + y.acc1};
}

// The digest of an input of total_bytes bytes whose blocks have all been summed into acc.
// DigestV1Finish(DigestV1Partial(p, n, 0), n) == DigestV1(p, n).
Digest128 DigestV1Finish(DigestV1Accumulator acc, uint64_t total_bytes);

// For tests and benchmarks only; production code calls the functions above.
namespace internal {

// The definition transcribed one block at a time, with no attention to speed: the reference
// the fast paths are checked against.
Digest128 DigestV1Slow(const void* data, size_t n);

// The implementations behind DigestV1Partial. kPortable runs everywhere; kAvx2 needs an
// x86-64 CPU with AVX2 and BMI2; kAvx512 also AVX-512 F and DQ. DigestV1Partial uses
// DigestV1DefaultPath(), the fastest available one.
enum class DigestV1Path { kPortable, kAvx2, kAvx512 };
bool DigestV1PathAvailable(DigestV1Path path);
DigestV1Path DigestV1DefaultPath();

// DigestV1Partial on a chosen path, which must be available (traps otherwise).
DigestV1Accumulator DigestV1PartialOn(DigestV1Path path, const void* data, size_t n,
                                      uint64_t first_block);

}  // namespace internal

}  // namespace ndt::kernels
