// unified_memory: the shape of CUDA's introductory examples and of many scientific codes: arrays
// from cudaMallocManaged that the host fills and reads in place (no copy is ever made), kernels on
// the default stream, cudaDeviceSynchronize before the host looks. A power iteration: every
// step a kernel multiplies the managed matrix by the managed vector, the host waits, reads the
// product, and writes the normalised vector back into managed memory for the next step; a
// prefetch hint first, as tuned codes give it.
// --plant: the product accumulates with float atomicAdd in racing order (CorpusColumnDotAtomic:
// the matrix is symmetric, so its column dot is the product).
// --unseeded: the starting vector is drawn from an unseeded generator (std::random_device), as
// a "random initial guess" often is.
#include <cmath>
#include <random>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const bool unseeded = corpus::HasFlag(argc, argv, "--unseeded");
  constexpr int kN = 256, kSteps = 12;
  float *m, *v, *w;
  CORPUS_CHECK(cudaMallocManaged(&m, kN * kN * sizeof(float)));
  CORPUS_CHECK(cudaMallocManaged(&v, kN * sizeof(float)));
  CORPUS_CHECK(cudaMallocManaged(&w, kN * sizeof(float)));
  // A symmetric matrix, filled by the host in place.
  const std::vector<float> values = corpus::MixedValues(kN * kN, 31);
  for (int r = 0; r < kN; ++r) {
    for (int c = 0; c <= r; ++c) m[r * kN + c] = m[c * kN + r] = values[r * kN + c] / 65536.0f;
  }
  std::mt19937 generator(unseeded ? std::random_device{}() : 7u);
  std::uniform_real_distribution<float> unit(0.5f, 1.0f);
  for (int i = 0; i < kN; ++i) v[i] = unit(generator);
  cudaMemLocation device{};
  device.type = cudaMemLocationTypeDevice;
  device.id = 0;
  CORPUS_CHECK(cudaMemPrefetchAsync(m, kN * kN * sizeof(float), device, 0, nullptr));

  std::vector<float> estimates;
  for (int step = 0; step < kSteps; ++step) {
    if (plant) {
      CORPUS_CHECK(cudaMemset(w, 0, kN * sizeof(float)));
      CorpusColumnDotAtomic<<<corpus::Blocks(kN * kN), corpus::kThreads>>>(m, v, w, kN, kN);
    } else {
      CorpusMatVec<<<corpus::Blocks(kN), corpus::kThreads>>>(m, v, w, kN, kN);
    }
    CORPUS_CHECK(cudaGetLastError());
    CORPUS_CHECK(cudaDeviceSynchronize());
    double norm = 0, rayleigh = 0;
    for (int i = 0; i < kN; ++i) {
      norm += double{w[i]} * w[i];
      rayleigh += double{v[i]} * w[i];
    }
    norm = std::sqrt(norm);
    for (int i = 0; i < kN; ++i) v[i] = static_cast<float>(w[i] / norm);
    estimates.push_back(static_cast<float>(rayleigh));
    std::printf("step %d eigenvalue %.6g\n", step, rayleigh);
  }
  CORPUS_CHECK(cudaFree(m));
  CORPUS_CHECK(cudaFree(w));
  estimates.insert(estimates.end(), v, v + kN);
  CORPUS_CHECK(cudaFree(v));
  ndt::programs::PrintChecksum(estimates.data(), estimates.size() * sizeof(float));
  return 0;
}
