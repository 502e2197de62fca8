// Digest v1 on the GPU (definition: formats/README.md). Two kernels, launched one after the
// other on the stream of the work whose output they digest, so that no host synchronisation
// is needed:
//
//   ndt_digest_v1_blocks(data, bytes, sums)   any grid: each thread sums the terms of blocks
//       j = thread, thread + threads, ...; a warp, then the CTA, adds them up, and thread 0
//       adds the CTA's two sums into sums[0..1] with 64-bit atomicAdd. Integer addition mod
//       2^64 is associative and commutative, so the result does not depend on the grid, the
//       block size or the order the CTAs finish in.
//   ndt_digest_v1_finish(sums, bytes, out, ticket)   one thread: out[0..1] = the digest and
//       sums reset to zero, then (after a system-wide fence) out[2] = ticket. `out` may be
//       mapped pinned host memory: a reader that sees the ticket sees the digest, and may reuse
//       both `out` and `sums`.
//
// Plain C entry points (extern "C"), so that the driver API finds them by name.
#include <cstdint>

#include "kernels/digest_v1_core.h"

namespace {

using ndt::kernels::digest_v1::LoadBlockBytes;
using ndt::kernels::digest_v1::Term;

__device__ __forceinline__ uint64_t WarpSum(uint64_t value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

}  // namespace

extern "C" __global__ void ndt_digest_v1_blocks(const unsigned char* data, unsigned long long bytes,
                                                unsigned long long* sums) {
  const uint64_t blocks = (bytes + 15) / 16;
  const uint64_t full_blocks = bytes / 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
  const auto* words = reinterpret_cast<const uint64_t*>(data);
  uint64_t acc0 = 0, acc1 = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < blocks;
       j += stride) {
    uint64_t a, b;
    if (aligned && j < full_blocks) {
      a = words[2 * j];  // little-endian, as every CUDA device is
      b = words[2 * j + 1];
    } else {
      LoadBlockBytes(data, bytes, j, &a, &b);
    }
    acc0 += Term(0, a, b, j);
    acc1 += Term(1, a, b, j);
  }
  acc0 = WarpSum(acc0);
  acc1 = WarpSum(acc1);
  __shared__ uint64_t warp_sums[2][32];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_sums[0][warp] = acc0;
    warp_sums[1][warp] = acc1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total0 = 0, total1 = 0;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) {
      total0 += warp_sums[0][w];
      total1 += warp_sums[1][w];
    }
    atomicAdd(&sums[0], static_cast<unsigned long long>(total0));
    atomicAdd(&sums[1], static_cast<unsigned long long>(total1));
  }
}

// Zeroes `count` words: the sums before their first digest (a kernel, not a memset, so that a
// profiler's record of it names it as ndtrace's: kDigestKernelPrefix).
extern "C" __global__ void ndt_digest_v1_zero(unsigned long long* words, unsigned long long count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    words[i] = 0;
  }
}

extern "C" __global__ void ndt_digest_v1_finish(unsigned long long* sums, unsigned long long bytes,
                                                volatile unsigned long long* out,
                                                unsigned long long ticket) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  out[0] = ndt::kernels::digest_v1::Finish(0, sums[0], bytes);
  out[1] = ndt::kernels::digest_v1::Finish(1, sums[1], bytes);
  sums[0] = 0;
  sums[1] = 0;
  // The ticket last: a host that sees it may reuse `out` and `sums` for the next digest, on any
  // stream.
  __threadfence_system();
  out[2] = ticket;
}
