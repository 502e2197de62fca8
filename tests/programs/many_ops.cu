// A long, cheap, deterministic stream of GPU ops with one nondeterministic kernel planted in
// it: what `ndtrace bisect` must find. Usage: many_ops [ITERATIONS [PLANT]].
//
// Setup (3 ops: one host-to-device copy, two memsets), then ITERATIONS kernel launches on the
// default stream: ScaleOffset on a 64-word state (exact unsigned arithmetic), except at
// iteration PLANT (default 3/5 of ITERATIONS; negative: none), which launches RacySum: 2^18
// floats of magnitudes 2^-20 to 2^20 added with atomicAdd into 4 cells, whose bits depend on
// the order of the additions. Nothing writes those cells afterwards, so every later state of
// device memory differs between runs that summed in a different order. Then one copy back and
// the checksum of the state and the sums. The planted launch is op 3 + PLANT.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_checksum.h"

__global__ void ScaleOffset(unsigned* data, unsigned mul, unsigned add, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = data[i] * mul + add;
  }
}

__global__ void RacySum(const float* values, float* sums, int n, int bins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&sums[i % bins], values[i]);
  }
}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "many_ops: %s: %s (%s)\n", what, cudaGetErrorString(error),
               cudaGetErrorName(error));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 10000;
  const long plant = argc > 2 ? std::strtol(argv[2], nullptr, 10) : iterations * 3 / 5;
  if (iterations < 1 || plant >= iterations) {
    std::fprintf(stderr, "usage: many_ops [ITERATIONS >= 1 [PLANT < ITERATIONS]]\n");
    return 2;
  }
  constexpr int kValues = 1 << 18;
  constexpr int kBins = 4;
  constexpr int kState = 64;
  std::vector<float> values(kValues);
  std::uint32_t seed = 12345;
  for (float& v : values) {
    seed = seed * 1664525u + 1013904223u;
    const float mantissa = 1.0f + static_cast<float>(seed >> 9) / static_cast<float>(1 << 23);
    v = std::ldexp(mantissa, static_cast<int>(seed % 41) - 20) * ((seed & 0x100) ? -1.0f : 1.0f);
  }

  float *d_values, *d_sums;
  unsigned* d_state;
  Check(cudaMalloc(&d_values, kValues * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&d_sums, kBins * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&d_state, kState * sizeof(unsigned)), "cudaMalloc");
  Check(cudaMemcpy(d_values, values.data(), kValues * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  Check(cudaMemset(d_sums, 0, kBins * sizeof(float)), "cudaMemset");
  Check(cudaMemset(d_state, 0, kState * sizeof(unsigned)), "cudaMemset");
  for (long i = 0; i < iterations; ++i) {
    if (i == plant) {
      RacySum<<<256, 256>>>(d_values, d_sums, kValues, kBins);
    } else {
      ScaleOffset<<<1, kState>>>(d_state, 1664525u, static_cast<unsigned>(i), kState);
    }
  }
  Check(cudaGetLastError(), "launch");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  struct {
    unsigned state[kState];
    float sums[kBins];
  } result;
  Check(cudaMemcpy(result.state, d_state, sizeof(result.state), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  Check(cudaMemcpy(result.sums, d_sums, sizeof(result.sums), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  Check(cudaFree(d_values), "cudaFree");
  Check(cudaFree(d_sums), "cudaFree");
  Check(cudaFree(d_state), "cudaFree");
  std::printf("many_ops: %ld iterations, RacySum at iteration %ld\n", iterations, plant);
  ndt::programs::PrintChecksum(&result, sizeof(result));
  return 0;
}
