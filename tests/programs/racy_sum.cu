// Nondeterministic: a million floats of magnitudes 2^-20 to 2^20 are added into 4 cells with
// atomicAdd. The order of the additions depends on scheduling, and float addition is not
// associative, so the sums (and the checksum) differ from run to run on a GPU; the stand-in's
// host implementation races threads to the same effect. Built with --default-stream per-thread,
// so its runtime calls are the _ptds/_ptsz variants.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_checksum.h"

__global__ void RacySum(const float* values, float* sums, int n, int bins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&sums[i % bins], values[i]);
  }
}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "racy_sum: %s: %s (%s)\n", what, cudaGetErrorString(error),
               cudaGetErrorName(error));
  std::exit(1);
}

}  // namespace

int main() {
  constexpr int kN = 1 << 20;
  constexpr int kBins = 4;
  std::vector<float> values(kN);
  std::uint32_t state = 12345;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    const float mantissa = 1.0f + static_cast<float>(state >> 9) / static_cast<float>(1 << 23);
    v = std::ldexp(mantissa, static_cast<int>(state % 41) - 20) * ((state & 0x100) ? -1.0f : 1.0f);
  }

  float *d_values, *d_sums;
  Check(cudaMalloc(&d_values, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&d_sums, kBins * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(d_values, values.data(), kN * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  Check(cudaMemset(d_sums, 0, kBins * sizeof(float)), "cudaMemset");
  RacySum<<<256, 256>>>(d_values, d_sums, kN, kBins);
  Check(cudaGetLastError(), "RacySum launch");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  float sums[kBins];
  Check(cudaMemcpy(sums, d_sums, sizeof(sums), cudaMemcpyDeviceToHost), "cudaMemcpy");
  Check(cudaFree(d_values), "cudaFree");
  Check(cudaFree(d_sums), "cudaFree");

  for (float s : sums) std::fprintf(stderr, "racy_sum: %a\n", s);
  ndt::programs::PrintChecksum(sums, sizeof(sums));
  return 0;
}
