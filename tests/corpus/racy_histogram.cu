// racy_histogram: index_add_ without a library. Scatters 8192 values of mixed magnitude into 64
// bins, ten times, on a non-blocking stream. Deterministic: CorpusSegmentSum (each bin summed
// in index order). --plant: CorpusScatterAdd (float atomicAdd in racing order), as
// torch.index_add_ / scatter_add_ on CUDA do. Both results are checked on the host against an
// exact-enough bound; the deterministic one bit for bit against the host's ordered sum.
#include <cmath>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  constexpr int kN = 8192, kBins = 64, kRounds = 10;
  const std::vector<float> values = corpus::MixedValues(kN, 7);
  std::vector<int> index(kN);
  for (int i = 0; i < kN; ++i) index[i] = (i * 37 + i / 5) % kBins;

  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* d_values;
  int* d_index;
  float* d_bins;
  CORPUS_CHECK(cudaMalloc(&d_values, kN * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_index, kN * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&d_bins, kRounds * kBins * sizeof(float)));
  CORPUS_CHECK(cudaMemcpyAsync(d_values, values.data(), kN * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_index, index.data(), kN * sizeof(int), cudaMemcpyHostToDevice,
                               stream));
  CORPUS_CHECK(cudaMemsetAsync(d_bins, 0, kRounds * kBins * sizeof(float), stream));
  for (int round = 0; round < kRounds; ++round) {
    float* out = d_bins + round * kBins;
    if (plant) {
      CorpusScatterAdd<<<corpus::Blocks(kN), corpus::kThreads, 0, stream>>>(d_values, d_index,
                                                                             out, kN);
    } else {
      CorpusSegmentSum<<<corpus::Blocks(kBins), corpus::kThreads, 0, stream>>>(
          d_values, d_index, out, kN, kBins);
    }
    CORPUS_CHECK(cudaGetLastError());
  }
  std::vector<float> bins(kRounds * kBins);
  CORPUS_CHECK(cudaMemcpyAsync(bins.data(), d_bins, bins.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));

  std::vector<float> ordered(kBins, 0.0f);
  std::vector<double> exact(kBins, 0.0);
  for (int i = 0; i < kN; ++i) {
    ordered[index[i]] += values[i];
    exact[index[i]] += values[i];
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int b = 0; b < kBins; ++b) {
      const float got = bins[round * kBins + b];
      const bool ok = plant ? std::fabs(got - exact[b]) <= 1e-3 * (1.0 + std::fabs(exact[b]))
                            : got == ordered[b];
      if (!ok) {
        std::fprintf(stderr, "bin %d of round %d: %.9g, expected %.9g\n", b, round, got,
                     static_cast<double>(ordered[b]));
        return 1;
      }
    }
  }
  ndt::programs::PrintChecksum(bins.data(), bins.size() * sizeof(float));
  cudaFree(d_values);
  cudaFree(d_index);
  cudaFree(d_bins);
  cudaStreamDestroy(stream);
  return 0;
}
