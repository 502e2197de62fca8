// PyTorch's way of passing RNG state to a kernel: dropout-like masking whose random bits come
// from (seed, offset, element index), passed as an at::PhiloxCudaState argument by value, the
// way ATen's random kernels receive it. The struct has PyTorch's layout and name, so ndtrace
// finds the state in the launch arguments as it does for PyTorch's kernels.
//
//   philox_dropout [--unseeded]
//
// The seed is 1234 unless --unseeded (then a fresh random one: a forgotten torch.manual_seed).
// Prints "checksum <hex>" of the output.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "program_checksum.h"

namespace at {
// ATen/cuda/detail/PhiloxCudaStateRaw.cuh: 24 bytes.
struct PhiloxCudaState {
  union Payload {
    uint64_t val;
    int64_t* ptr;
  };
  Payload seed_;
  Payload offset_;
  uint32_t offset_intragraph_ = 0;
  bool captured_ = false;
};
}  // namespace at

// A counter-based hash of (seed, offset + i): the same bits on every device.
__host__ __device__ inline uint32_t Bits(uint64_t seed, uint64_t counter) {
  uint64_t x = seed ^ (counter * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

__global__ void DropoutLike(at::PhiloxCudaState state, const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool keep = (Bits(state.seed_.val, state.offset_.val + i) & 1u) != 0;
    out[i] = keep ? in[i] * 2.0f : 0.0f;
  }
}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "philox_dropout: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const bool unseeded = argc > 1 && std::strcmp(argv[1], "--unseeded") == 0;
  constexpr int kN = 4096;
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i % 13);
  float *in = nullptr, *out = nullptr;
  Check(cudaMalloc(&in, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&out, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(in, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "HtoD");
  at::PhiloxCudaState state{};
  // A fresh 64-bit seed per run, as torch.seed() draws one; unlike the time, it differs between
  // two runs started within one clock tick.
  state.seed_.val = unseeded ? (static_cast<uint64_t>(std::random_device{}()) << 32) |
                                   std::random_device{}()
                             : 1234;
  for (int step = 0; step < 2; ++step) {
    state.offset_.val = static_cast<uint64_t>(step) * kN;  // as the generator advances
    DropoutLike<<<4, 128>>>(state, in, out, kN);
    Check(cudaGetLastError(), "launch");
  }
  Check(cudaMemcpy(host.data(), out, kN * sizeof(float), cudaMemcpyDeviceToHost), "DtoH");
  ndt::programs::PrintChecksum(host.data(), host.size() * sizeof(float));
  return 0;
}
