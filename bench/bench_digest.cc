// bench_digest: digest v1 throughput as a ratio to memcpy on the same buffer, same run.
//
// For each buffer size (4 KiB to 1 MiB in L1/L2, 8 MiB in L3, 64 and 256 MiB in DRAM) it times
// memcpy of the buffer to a separate destination and DigestV1 of the buffer, each as the best of
// many alternating runs, and prints both in GB/s (1e9 bytes of input per second), their ratio and
// whether the ratio meets the target. Exits 0 either way: the figures are for reading, not a test.
//
// memcpy's speed on some CPUs depends on where the destination sits relative to the source
// (glibc's `rep movsb` on AMD Zen slows down several-fold for some page offsets), so the
// baseline is the best over a few destination offsets: the machine's memcpy at its best.
//
// On x86-64 it also estimates the core's clock (a chain of dependent one-cycle adds, timed) and
// prints both speeds as core cycles per 16-byte block, the unit of digest v1's work: one block
// is two 64x64->128-bit multiplies (one per lane) and about twenty simple operations.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/digest_v1.h"

namespace {

constexpr double kTargetRatio = 0.80;
constexpr size_t kPageBytes = 4096;
constexpr size_t kDstOffsets[] = {0, 64, 2048};

// Keeps the optimiser from dropping work whose result is otherwise unused.
volatile uint64_t g_sink;

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], FreeDeleter>;

// A page-aligned buffer of at least n bytes, every page written once.
Buffer PageAligned(size_t n) {
  const size_t rounded = (n + kPageBytes - 1) / kPageBytes * kPageBytes;
  Buffer buffer(static_cast<unsigned char*>(std::aligned_alloc(kPageBytes, rounded)));
  if (buffer == nullptr) {
    std::fprintf(stderr, "error: cannot allocate %zu bytes\n", rounded);
    std::exit(1);
  }
  std::memset(buffer.get(), 1, rounded);
  return buffer;
}

// Seconds per call of fn, timed over `inner` back-to-back calls.
template <typename Fn>
double SecondsPerCall(int inner, Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < inner; ++i) fn();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return took.count() / inner;
}

// The core's clock in Hz, estimated from the time a chain of dependent register adds (one cycle
// of latency each on every x86-64 core) takes: the best of many short tries. 0 elsewhere.
double CoreHz() {
#if defined(__x86_64__) && defined(__GNUC__)
  constexpr long kIterations = 1'000'000;  // ~5 ms a try: short enough to fit between preemptions
  constexpr int kAddsPerIteration = 16;
  double best_s = 1e30;
  for (int attempt = 0; attempt < 100; ++attempt) {
    uint64_t x = attempt;
    best_s = std::min(best_s, SecondsPerCall(1, [&] {
                        for (long i = 0; i < kIterations; ++i) {
                          asm volatile(
                              "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                              "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                              "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                              "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                              : "+r"(x));
                        }
                      }));
    g_sink = x;
  }
  return static_cast<double>(kIterations) * kAddsPerIteration / best_s;
#else
  return 0;
#endif
}

struct Size {
  const char* label;
  size_t bytes;
  int reps;
  int inner;
};

}  // namespace

int main() {
  namespace internal = ndt::kernels::internal;
  // 4 KiB to 1 MiB in L1/L2, 8 MiB in L3, 64 MiB and 256 MiB in DRAM.
  const Size sizes[] = {
      {"4 KiB", size_t{4} << 10, 400, 1024},
      {"64 KiB", size_t{64} << 10, 100, 64},
      {"1 MiB", size_t{1} << 20, 40, 8},
      {"8 MiB", size_t{8} << 20, 15, 4},
      {"64 MiB", size_t{64} << 20, 6, 1},
      {"256 MiB", size_t{256} << 20, 4, 1},
  };
  const internal::DigestV1Path path = internal::DigestV1DefaultPath();
  // With the AVX-512 path the AVX2 path is timed too (the same definition, one step down).
  const bool also_avx2 = path == internal::DigestV1Path::kAvx512;
  const double hz = CoreHz();
  std::printf("digest path: %s; core clock estimate %.2f GHz (dependent adds)\n",
              path == internal::DigestV1Path::kAvx512 ? "avx512"
              : path == internal::DigestV1Path::kAvx2 ? "avx2"
                                                      : "portable",
              hz / 1e9);
  std::printf("%-8s %12s %12s %7s  %-16s %s%s\n", "size", "memcpy GB/s", "digest GB/s", "ratio",
              "target", "cycles/16 B: memcpy, digest", also_avx2 ? "; avx2 path GB/s" : "");
  bool all_met = true;
  for (const Size& size : sizes) {
    const Buffer src = PageAligned(size.bytes);
    const Buffer dst = PageAligned(size.bytes + kDstOffsets[std::size(kDstOffsets) - 1]);
    uint32_t x = 0x12345678;
    for (size_t i = 0; i < size.bytes; ++i) {
      x = x * 1664525u + 1013904223u;
      src[i] = static_cast<unsigned char>(x >> 24);
    }

    // memcpy and digest runs alternate, so a noisy spell on a shared machine hits both.
    double copy_s = 1e30, digest_s = 1e30, avx2_s = 1e30;
    for (int r = 0; r < size.reps; ++r) {
      for (size_t offset : kDstOffsets) {
        copy_s = std::min(copy_s, SecondsPerCall(size.inner, [&] {
                            std::memcpy(dst.get() + offset, src.get(), size.bytes);
                            g_sink = dst[offset + size.bytes / 2];
                          }));
        digest_s = std::min(digest_s, SecondsPerCall(size.inner, [&] {
                              g_sink = ndt::kernels::DigestV1(src.get(), size.bytes).lo;
                            }));
        if (also_avx2) {
          avx2_s = std::min(avx2_s, SecondsPerCall(size.inner, [&] {
                              g_sink = internal::DigestV1PartialOn(internal::DigestV1Path::kAvx2,
                                                                   src.get(), size.bytes, 0)
                                           .acc0;
                            }));
        }
      }
    }
    const double copy_gbs = size.bytes / copy_s / 1e9;
    const double digest_gbs = size.bytes / digest_s / 1e9;
    const double ratio = digest_gbs / copy_gbs;
    const bool met = ratio >= kTargetRatio;
    all_met = all_met && met;
    std::printf("%-8s %12.2f %12.2f %7.2f  >= %.2f %-8s %6.2f %6.2f", size.label, copy_gbs,
                digest_gbs, ratio, kTargetRatio, met ? "met" : "NOT met", hz * 16 / 1e9 / copy_gbs,
                hz * 16 / 1e9 / digest_gbs);
    if (also_avx2) std::printf("   %12.2f", size.bytes / avx2_s / 1e9);
    std::printf("\n");
  }
  std::printf("target %s at every size\n", all_met ? "met" : "NOT met");
  return 0;
}
