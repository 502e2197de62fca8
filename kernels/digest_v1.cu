// Digest v1 on the GPU (definition: formats/README.md). One kernel per digest, launched on the
// stream of the work whose memory it digests, so that no host synchronisation is needed:
//
//   ndt_digest_v1(data, bytes, scratch, partials, out, ticket)   any grid up to kMaxGrid CTAs:
//       each thread sums the terms of blocks j = thread, thread + threads, ...; a warp, then
//       the CTA, adds them up, and thread 0 adds the CTA's two sums into scratch[0..1] with
//       64-bit atomicAdd. Integer addition mod 2^64 is associative and commutative, so the
//       digest does not depend on the grid, the block size or the order the CTAs finish in.
//       With `partials` (kMaxGrid doubles of device memory), the f32 summary too
//       (digest_v1_core.h): counts and min/max keys by atomics (order-free), and the sum in a
//       fixed order: per thread, a fixed warp tree, warps in order, each CTA's sum into
//       partials[CTA], the CTAs' sums in index order; so the same bytes give the same sum at
//       the same size. The CTA that finishes last (counted in scratch[2]) writes out[0..6]
//       (digest_v1_core.h's layout), leaves the scratch zero again, and then, after a
//       system-wide fence, out[7] = ticket. `out` may be mapped pinned host memory: a reader
//       that sees the ticket sees the rest, and may reuse `out`, `scratch` and `partials`.
//   ndt_digest_v1_zero(words, count)   the scratch zeroed before its first use.
//
// Plain C entry points (extern "C"), so that the driver API finds them by name.
#include <cstdint>

#include "kernels/digest_v1_core.h"

namespace {

namespace digest = ndt::kernels::digest_v1;

__device__ __forceinline__ uint64_t WarpSum(uint64_t value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ double WarpSum(double value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ uint32_t WarpMin(uint32_t value) {
  return __reduce_min_sync(0xffffffffu, value);
}

__device__ __forceinline__ uint32_t WarpMax(uint32_t value) {
  return __reduce_max_sync(0xffffffffu, value);
}

}  // namespace

extern "C" __global__ void ndt_digest_v1(const unsigned char* data, unsigned long long bytes,
                                         unsigned long long* scratch, double* partials,
                                         volatile unsigned long long* out,
                                         unsigned long long ticket) {
  const uint64_t blocks = (bytes + 15) / 16;
  const uint64_t full_blocks = bytes / 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
  const bool summarize = partials != nullptr;
  const auto* words = reinterpret_cast<const uint64_t*>(data);
  uint64_t acc0 = 0, acc1 = 0;
  digest::F32Summary mine = digest::F32Summary::Empty();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks;
       j += stride) {
    uint64_t a, b;
    if (aligned && j < full_blocks) {
      a = words[2 * j];  // little-endian, as every CUDA device is
      b = words[2 * j + 1];
    } else {
      digest::LoadBlockBytes(data, bytes, j, &a, &b);
    }
    acc0 += digest::Term(0, a, b, j);
    acc1 += digest::Term(1, a, b, j);
    if (summarize) {
      const uint32_t floats[4] = {static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                                  static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)};
      for (int k = 0; k < 4; ++k) {
        if (16 * j + 4 * k + 4 <= bytes) mine.Add(floats[k]);
      }
    }
  }

  // The CTA's totals, warps in order.
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned warps = (blockDim.x + 31) / 32;
  __shared__ uint64_t warp_acc[2][32];
  __shared__ digest::F32Summary warp_summary[32];
  __shared__ bool last;
  acc0 = WarpSum(acc0);
  acc1 = WarpSum(acc1);
  if (summarize) {
    mine.nan = WarpSum(mine.nan);
    mine.inf = WarpSum(mine.inf);
    mine.min_key = WarpMin(mine.min_key);
    mine.max_key = WarpMax(mine.max_key);
    mine.sum = WarpSum(mine.sum);
  }
  if (lane == 0) {
    warp_acc[0][warp] = acc0;
    warp_acc[1][warp] = acc1;
    warp_summary[warp] = mine;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total0 = 0, total1 = 0;
    digest::F32Summary cta = digest::F32Summary::Empty();
    for (unsigned w = 0; w < warps; ++w) {
      total0 += warp_acc[0][w];
      total1 += warp_acc[1][w];
      cta.Merge(warp_summary[w]);
    }
    atomicAdd(&scratch[0], static_cast<unsigned long long>(total0));
    atomicAdd(&scratch[1], static_cast<unsigned long long>(total1));
    if (summarize) {
      if (cta.nan != 0) atomicAdd(&scratch[3], static_cast<unsigned long long>(cta.nan));
      if (cta.inf != 0) atomicAdd(&scratch[4], static_cast<unsigned long long>(cta.inf));
      auto* keys = reinterpret_cast<unsigned int*>(&scratch[5]);  // little-endian halves
      atomicMax(&keys[0], ~cta.min_key);
      atomicMax(&keys[1], cta.max_key);
      partials[blockIdx.x] = cta.sum;
    }
    // Everything above is visible device-wide before this CTA counts itself done.
    __threadfence();
    last = atomicAdd(&scratch[2], 1ull) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;

  // The last CTA: every other CTA's atomics and partial sum are in place.
  __threadfence();
  double sum = 0;
  if (summarize) {
    const volatile double* sums = partials;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) sum += sums[i];
    sum = WarpSum(sum);
    __shared__ double warp_sums[32];
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    sum = 0;
    for (unsigned w = 0; w < warps; ++w) sum += warp_sums[w];
  }
  if (threadIdx.x != 0) return;
  volatile unsigned long long* totals = scratch;
  const uint64_t keys = totals[5];
  out[0] = digest::Finish(0, totals[0], bytes);
  out[1] = digest::Finish(1, totals[1], bytes);
  out[2] = static_cast<unsigned long long>(__double_as_longlong(sum));
  out[3] = (~keys & 0xffffffffull) | (keys & 0xffffffff00000000ull);
  out[4] = totals[3];
  out[5] = totals[4];
  out[6] = summarize ? 1 : 0;
  for (int i = 0; i < digest::kScratchWords; ++i) totals[i] = 0;
  // The ticket last: a host that sees it may reuse `out`, `scratch` and `partials` for the next
  // digest, on any stream.
  __threadfence_system();
  out[digest::kOutTicket] = ticket;
}

// Zeroes `count` words: the scratch before its first digest (a kernel, not a memset, so that a
// profiler's record of it names it as ndtrace's: kDigestKernelPrefix).
extern "C" __global__ void ndt_digest_v1_zero(unsigned long long* words, unsigned long long count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    words[i] = 0;
  }
}
