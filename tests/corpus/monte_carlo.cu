// monte_carlo: a double-precision Monte Carlo estimate as quantitative and physics codes write
// one on cuRAND's host API: two host threads, each with its own Philox generator on its own
// non-blocking stream, seeded alike and skipped ahead to a disjoint stretch of the sequence
// (curandSetGeneratorOffset), draw batches of normal, log-normal (a stock price at expiry under
// geometric Brownian motion) and uniform doubles (curandGenerateNormalDouble,
// curandGenerateLogNormalDouble, curandGenerateUniformDouble); each batch is summed on the device
// by a dot product with a vector of ones (cublasDdot_v2, result on the host). The main thread
// combines the threads' sums and checks each mean against its expectation.
// --plant: thread 1 seeds its generator from std::random_device, as a program that forgot a
// fixed seed for one of its workers: its draws differ from run to run. --mrg: MRG32k3a
// generators (codes that want its statistical quality), which make a double of one draw.
#include <cublas_v2.h>
#include <curand.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"

namespace {

constexpr int kThreads = 2, kBatches = 4;
constexpr size_t kSamples = 8192;  // per batch
constexpr unsigned long long kSeed = 20261128;
// Geometric Brownian motion: S_T = S_0 exp((r - sigma^2 / 2) T + sigma sqrt(T) Z).
constexpr double kS0 = 100, kRate = 0.03, kSigma = 0.2, kExpiry = 1;

void Check(curandStatus_t status, const char* what, int line) {
  if (status != CURAND_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s (line %d) failed: curandStatus %d\n", what, line,
                 static_cast<int>(status));
    std::exit(2);
  }
}
#define RAND_CHECK(call) Check((call), #call, __LINE__)

struct Sums {
  double normal = 0, price = 0, uniform = 0;
};

void Worker(int t, bool plant, bool mrg, Sums* out) {
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  curandGenerator_t generator;
  RAND_CHECK(curandCreateGenerator(
      &generator, mrg ? CURAND_RNG_PSEUDO_MRG32K3A : CURAND_RNG_PSEUDO_PHILOX4_32_10));
  RAND_CHECK(curandSetStream(generator, stream));
  const unsigned long long seed = plant && t == 1 ? std::random_device{}() : kSeed;
  RAND_CHECK(curandSetPseudoRandomGeneratorSeed(generator, seed));
  RAND_CHECK(curandSetGeneratorOffset(generator, static_cast<unsigned long long>(t) << 32));
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, stream));

  double *d_samples, *d_ones;
  CORPUS_CHECK(cudaMalloc(&d_samples, kSamples * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&d_ones, kSamples * sizeof(double)));
  const std::vector<double> ones(kSamples, 1.0);
  CORPUS_CHECK(cudaMemcpyAsync(d_ones, ones.data(), kSamples * sizeof(double),
                               cudaMemcpyHostToDevice, stream));
  const double mu = std::log(kS0) + (kRate - kSigma * kSigma / 2) * kExpiry;
  const double sigma = kSigma * std::sqrt(kExpiry);
  const auto sum = [&]() {
    double total = 0;
    BLAS_CHECK(cublasDdot(handle, static_cast<int>(kSamples), d_samples, 1, d_ones, 1, &total));
    return total;
  };
  for (int batch = 0; batch < kBatches; ++batch) {
    RAND_CHECK(curandGenerateNormalDouble(generator, d_samples, kSamples, 0.0, 1.0));
    out->normal += sum();
    RAND_CHECK(curandGenerateLogNormalDouble(generator, d_samples, kSamples, mu, sigma));
    out->price += sum();
    RAND_CHECK(curandGenerateUniformDouble(generator, d_samples, kSamples));
    out->uniform += sum();
  }
  CORPUS_CHECK(cudaFree(d_ones));
  CORPUS_CHECK(cudaFree(d_samples));
  BLAS_CHECK(cublasDestroy(handle));
  RAND_CHECK(curandDestroyGenerator(generator));
  CORPUS_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const bool mrg = corpus::HasFlag(argc, argv, "--mrg");
  CORPUS_CHECK(cudaSetDevice(0));
  std::vector<Sums> sums(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Worker, t, plant, mrg, &sums[t]);
  for (std::thread& thread : threads) thread.join();

  Sums total;
  for (const Sums& s : sums) {
    total.normal += s.normal;
    total.price += s.price;
    total.uniform += s.uniform;
  }
  const double count = double{kThreads} * kBatches * kSamples;
  const double normal = total.normal / count, price = total.price / count,
               uniform = total.uniform / count;
  // Expectations, within 6 standard errors of the mean.
  const double forward = kS0 * std::exp(kRate * kExpiry);
  const double price_error =
      forward * std::sqrt((std::exp(kSigma * kSigma * kExpiry) - 1) / count);
  if (std::fabs(normal) > 6 / std::sqrt(count) || std::fabs(price - forward) > 6 * price_error ||
      std::fabs(uniform - 0.5) > 6 * std::sqrt(1.0 / 12 / count)) {
    std::fprintf(stderr, "means off: normal %.6f, price %.6f (forward %.6f), uniform %.6f\n",
                 normal, price, forward, uniform);
    return 1;
  }
  std::printf("forward price %.6f (exact %.6f), normal mean %.6f, uniform mean %.6f\n", price,
              forward, normal, uniform);
  const double all[] = {total.normal, total.price, total.uniform};
  ndt::programs::PrintChecksum(all, sizeof(all));
  return 0;
}
