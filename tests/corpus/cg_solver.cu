// cg_solver: a double-precision solver as scientific codes write one on cuBLAS. The main thread
// forms a symmetric positive definite system matrix A = M^T M + n I with cublasDgemm_v2 (M from
// a fixed seed, uploaded from pinned memory), then two worker threads solve A x = b for their
// own right-hand side by conjugate gradients at once, each with its own handle on its own
// non-blocking stream: per iteration q = A p (cublasDgemv_v2), the step lengths from dot products
// read back to the host (cublasDdot_v2 in host pointer mode, which waits for the stream), x and
// r updated (cublasDaxpy_v2), p = r + beta p (cublasDscal_v2, cublasDaxpy_v2). The main thread
// waits for both solves through events, then computes both residuals B - A X at once with
// cublasDgemmStridedBatched (A shared: stride 0) and reads back the solutions.
// --plant: cublasSetAtomicsMode(CUBLAS_ATOMICS_ALLOWED) on the main handle, so the GEMM that
// forms A may add split-K partial sums with atomics: A, and every solve after it, differ in their
// last bits from run to run. Each solution is checked on the host (residual of the host's A).
#include <cublas_v2.h>

#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"

namespace {

constexpr int kN = 48, kRhs = 2, kIterations = 40;

// A uniform value in [-1, 1) from a fixed 64-bit LCG: the same in every run.
double Uniform(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<double>(*state >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

struct Solve {
  std::vector<double> x;
  int iterations = 0;
};

// Conjugate gradients on A x = b (A on the device, symmetric positive definite), x from 0.
void Cg(const double* d_a, const std::vector<double>& b, cudaEvent_t ready,
        double* d_x, Solve* out) {
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamWaitEvent(stream, ready, 0));  // A is formed
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, stream));
  double *d_r, *d_p, *d_q;
  CORPUS_CHECK(cudaMalloc(&d_r, kN * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&d_p, kN * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&d_q, kN * sizeof(double)));
  CORPUS_CHECK(cudaMemsetAsync(d_x, 0, kN * sizeof(double), stream));
  CORPUS_CHECK(
      cudaMemcpyAsync(d_r, b.data(), kN * sizeof(double), cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_p, d_r, kN * sizeof(double), cudaMemcpyDeviceToDevice, stream));
  const double one = 1.0, zero = 0.0;
  double rr = 0;
  BLAS_CHECK(cublasDdot(handle, kN, d_r, 1, d_r, 1, &rr));
  const double stop = 1e-24 * rr;
  int iteration = 0;
  for (; iteration < kIterations && rr > stop; ++iteration) {
    BLAS_CHECK(cublasDgemv(handle, CUBLAS_OP_N, kN, kN, &one, d_a, kN, d_p, 1, &zero, d_q, 1));
    double pq = 0;
    BLAS_CHECK(cublasDdot(handle, kN, d_p, 1, d_q, 1, &pq));
    const double alpha = rr / pq, minus_alpha = -alpha;
    BLAS_CHECK(cublasDaxpy(handle, kN, &alpha, d_p, 1, d_x, 1));
    BLAS_CHECK(cublasDaxpy(handle, kN, &minus_alpha, d_q, 1, d_r, 1));
    double rr_next = 0;
    BLAS_CHECK(cublasDdot(handle, kN, d_r, 1, d_r, 1, &rr_next));
    const double beta = rr_next / rr;
    BLAS_CHECK(cublasDscal(handle, kN, &beta, d_p, 1));
    BLAS_CHECK(cublasDaxpy(handle, kN, &one, d_r, 1, d_p, 1));
    rr = rr_next;
  }
  out->iterations = iteration;
  out->x.resize(kN);
  CORPUS_CHECK(cudaMemcpyAsync(out->x.data(), d_x, kN * sizeof(double), cudaMemcpyDeviceToHost,
                               stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));
  CORPUS_CHECK(cudaFree(d_q));
  CORPUS_CHECK(cudaFree(d_p));
  CORPUS_CHECK(cudaFree(d_r));
  BLAS_CHECK(cublasDestroy(handle));
  CORPUS_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  CORPUS_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, stream));
  if (plant) BLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_ALLOWED));

  // M in pinned memory, A = M^T M + n I on the device.
  const size_t matrix = size_t{kN} * kN;
  double* m_host;
  CORPUS_CHECK(cudaMallocHost(&m_host, matrix * sizeof(double)));
  uint64_t state = 2026;
  for (size_t i = 0; i < matrix; ++i) m_host[i] = Uniform(&state);
  std::vector<double> identity(matrix, 0.0);
  for (int i = 0; i < kN; ++i) identity[i + static_cast<size_t>(i) * kN] = kN;
  double *d_m, *d_a;
  CORPUS_CHECK(cudaMalloc(&d_m, matrix * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&d_a, matrix * sizeof(double)));
  CORPUS_CHECK(
      cudaMemcpyAsync(d_m, m_host, matrix * sizeof(double), cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_a, identity.data(), matrix * sizeof(double),
                               cudaMemcpyHostToDevice, stream));
  const double one = 1.0, minus_one = -1.0;
  BLAS_CHECK(cublasDgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, kN, kN, kN, &one, d_m, kN, d_m, kN,
                         &one, d_a, kN));
  cudaEvent_t formed;
  CORPUS_CHECK(cudaEventCreateWithFlags(&formed, cudaEventDisableTiming));
  CORPUS_CHECK(cudaEventRecord(formed, stream));

  // The right-hand sides, and the solves on two threads at once.
  std::vector<std::vector<double>> b(kRhs, std::vector<double>(kN));
  for (auto& rhs : b) {
    for (double& v : rhs) v = Uniform(&state);
  }
  double* d_x;  // the solutions side by side, one column each
  CORPUS_CHECK(cudaMalloc(&d_x, matrix * sizeof(double)));
  std::vector<Solve> solves(kRhs);
  std::vector<std::thread> workers;
  for (int w = 0; w < kRhs; ++w) {
    workers.emplace_back(Cg, d_a, std::cref(b[w]), formed, d_x + static_cast<size_t>(w) * kN, &solves[w]);
  }
  for (std::thread& worker : workers) worker.join();

  // Residuals R = B - A X for both at once: one batched GEMM, A shared (stride 0).
  double* d_r;
  CORPUS_CHECK(cudaMalloc(&d_r, kRhs * kN * sizeof(double)));
  for (int w = 0; w < kRhs; ++w) {
    CORPUS_CHECK(cudaMemcpyAsync(d_r + static_cast<size_t>(w) * kN, b[w].data(), kN * sizeof(double),
                                 cudaMemcpyHostToDevice, stream));
  }
  BLAS_CHECK(cublasDgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, kN, 1, kN, &minus_one,
                                       d_a, kN, 0, d_x, kN, kN, &one, d_r, kN, kN, kRhs));
  std::vector<double> residual(size_t{kRhs} * kN);
  CORPUS_CHECK(cudaMemcpyAsync(residual.data(), d_r, residual.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));

  // The host's check: each solution against the host's A.
  std::vector<double> a(matrix);
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kN; ++i) {
      double sum = i == j ? kN : 0.0;
      for (int l = 0; l < kN; ++l) sum += m_host[l + static_cast<size_t>(i) * kN] * m_host[l + static_cast<size_t>(j) * kN];
      a[i + static_cast<size_t>(j) * kN] = sum;
    }
  }
  std::vector<double> all;
  for (int w = 0; w < kRhs; ++w) {
    double worst = 0, device_worst = 0;
    for (int i = 0; i < kN; ++i) {
      double ax = 0;
      for (int l = 0; l < kN; ++l) ax += a[i + static_cast<size_t>(l) * kN] * solves[w].x[l];
      worst = std::fmax(worst, std::fabs(b[w][i] - ax));
      device_worst = std::fmax(device_worst, std::fabs(residual[static_cast<size_t>(w) * kN + i]));
    }
    if (worst > 1e-8 || device_worst > 1e-8) {
      std::fprintf(stderr, "solve %d: residual %.3g on the host, %.3g on the device after %d "
                   "iterations\n", w, worst, device_worst, solves[w].iterations);
      return 1;
    }
    std::printf("solve %d: %d iterations, residual %.3g\n", w, solves[w].iterations, worst);
    all.insert(all.end(), solves[w].x.begin(), solves[w].x.end());
  }
  all.insert(all.end(), residual.begin(), residual.end());
  ndt::programs::PrintChecksum(all.data(), all.size() * sizeof(double));
  CORPUS_CHECK(cudaFree(d_r));
  CORPUS_CHECK(cudaFree(d_x));
  CORPUS_CHECK(cudaFree(d_a));
  CORPUS_CHECK(cudaFree(d_m));
  CORPUS_CHECK(cudaFreeHost(m_host));
  CORPUS_CHECK(cudaEventDestroy(formed));
  BLAS_CHECK(cublasDestroy(handle));
  CORPUS_CHECK(cudaStreamDestroy(stream));
  return 0;
}
