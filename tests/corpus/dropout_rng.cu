// dropout_rng: dropout over several training steps with cuRAND's Philox generator on the
// compute stream, as a framework's dropout draws its mask: each step draws n uniforms (the
// generator's offset advances), CorpusDropout masks and rescales the activations, CorpusAxpby
// accumulates the result. Deterministic: the generator is seeded once with a fixed seed.
// --plant: seeded from std::random_device (an "unseeded" run: a fresh seed every process).
// Every output element is checked on the host to be 0 or x / (1 - p).
#include <curand.h>

#include <cmath>
#include <random>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

void CheckCurand(curandStatus_t status, const char* what) {
  if (status != CURAND_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(status));
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  constexpr int kN = 4096, kSteps = 6;
  constexpr float kP = 0.25f;
  const std::vector<float> x = corpus::MixedValues(kN, 3);

  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  curandGenerator_t generator;
  CheckCurand(curandCreateGenerator(&generator, CURAND_RNG_PSEUDO_PHILOX4_32_10),
              "curandCreateGenerator");
  CheckCurand(curandSetStream(generator, stream), "curandSetStream");
  const unsigned long long seed = plant ? std::random_device{}() : 1234ull;
  CheckCurand(curandSetPseudoRandomGeneratorSeed(generator, seed), "curandSetSeed");

  float *d_x, *d_u, *d_y, *d_sum;
  CORPUS_CHECK(cudaMalloc(&d_x, kN * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_u, kN * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_y, kSteps * kN * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_sum, kN * sizeof(float)));
  CORPUS_CHECK(cudaMemcpyAsync(d_x, x.data(), kN * sizeof(float), cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemsetAsync(d_sum, 0, kN * sizeof(float), stream));
  for (int step = 0; step < kSteps; ++step) {
    float* y = d_y + step * kN;
    CheckCurand(curandGenerateUniform(generator, d_u, kN), "curandGenerateUniform");
    CorpusDropout<<<corpus::Blocks(kN), corpus::kThreads, 0, stream>>>(d_x, d_u, kP, y, kN);
    CorpusAxpby<<<corpus::Blocks(kN), corpus::kThreads, 0, stream>>>(1.0f, y, 1.0f, d_sum, kN);
    CORPUS_CHECK(cudaGetLastError());
  }
  std::vector<float> y(kSteps * kN), sum(kN);
  CORPUS_CHECK(cudaMemcpyAsync(y.data(), d_y, y.size() * sizeof(float), cudaMemcpyDeviceToHost,
                               stream));
  CORPUS_CHECK(cudaMemcpyAsync(sum.data(), d_sum, sum.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < kSteps * kN; ++i) {
    const float kept = x[i % kN] / (1.0f - kP);
    if (y[i] != 0.0f && y[i] != kept) {
      std::fprintf(stderr, "element %d: %.9g is neither 0 nor %.9g\n", i, y[i], kept);
      return 1;
    }
  }
  std::vector<float> result = y;
  result.insert(result.end(), sum.begin(), sum.end());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  curandDestroyGenerator(generator);
  cudaFree(d_x);
  cudaFree(d_u);
  cudaFree(d_y);
  cudaFree(d_sum);
  cudaStreamDestroy(stream);
  return 0;
}
