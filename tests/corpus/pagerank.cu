// pagerank: personalised PageRank by power iteration, as an analytics or graph-learning engineer
// writes it on cuBLAS's classic API (no kernel of its own). The main thread builds the
// column-stochastic link matrix H of a fixed random graph on the host and uploads it with
// cublasSetMatrix (a synchronous copy) into a device matrix with padded columns (ld = n + 8).
// Two threads then rank the pages for their own teleport vector at once, each with its own
// handle on its own non-blocking stream: v uploaded with cublasSetVectorAsync, x = v, and per
// iteration y = d H x (cublasSgemv), y += (1 - d) v (cublasSaxpy), y normalised by its sum of
// magnitudes (cublasSasum to the host, cublasSscal), the change y - x as a one-column matrix sum
// (cublasSgeam), its norm (cublasSnrm2: thread 0 in host pointer mode, thread 1 in device
// pointer mode into a device scalar read back with cublasGetVectorAsync), x and y exchanged
// (cublasSswap); until the change is below 1e-6. Each thread copies its ranking into its column
// of X (cublasScopy) and finds its top page (cublasIsamax). The main thread transposes X into
// rows (cublasSgeam with CUBLAS_OP_T) and reads them back with cublasGetMatrix; the host checks
// both rankings against its own power iteration.
// --plant: thread 1's teleport vector is drawn from std::random_device (a random restart set
// the programmer believed seeded): the first op that differs is its upload, the data the program
// copies to the GPU, not any cuBLAS call.
#include <cublas_v2.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"

namespace {

constexpr int kPages = 64, kLd = kPages + 8, kRankings = 2, kMaxIterations = 100;
constexpr float kDamping = 0.85f, kTolerance = 1e-6f;

struct Ranking {
  int iterations = 0;
  int top = 0;  // 1-based, as cublasIsamax returns it
};

// x = v, then power iteration on x = d H x + (1 - d) v, normalised to sum 1.
void Rank(const float* d_h, const std::vector<float>& teleport, bool device_norm, float* d_column,
          Ranking* out) {
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, stream));
  float *d_v, *d_x, *d_y, *d_change, *d_norm;
  CORPUS_CHECK(cudaMalloc(&d_v, kPages * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_x, kPages * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_y, kPages * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_change, kPages * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_norm, sizeof(float)));
  BLAS_CHECK(cublasSetVectorAsync(kPages, sizeof(float), teleport.data(), 1, d_v, 1, stream));
  BLAS_CHECK(cublasScopy(handle, kPages, d_v, 1, d_x, 1));
  const float damping = kDamping, zero = 0.0f, one = 1.0f, minus_one = -1.0f;
  const float restart = 1.0f - kDamping;
  int iteration = 0;
  for (; iteration < kMaxIterations; ++iteration) {
    BLAS_CHECK(cublasSgemv(handle, CUBLAS_OP_N, kPages, kPages, &damping, d_h, kLd, d_x, 1, &zero,
                           d_y, 1));
    BLAS_CHECK(cublasSaxpy(handle, kPages, &restart, d_v, 1, d_y, 1));
    float sum = 0;
    BLAS_CHECK(cublasSasum(handle, kPages, d_y, 1, &sum));
    const float scale = 1.0f / sum;
    BLAS_CHECK(cublasSscal(handle, kPages, &scale, d_y, 1));
    BLAS_CHECK(cublasSgeam(handle, CUBLAS_OP_N, CUBLAS_OP_N, kPages, 1, &one, d_y, kPages,
                           &minus_one, d_x, kPages, d_change, kPages));
    float change = 0;
    if (device_norm) {
      BLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE));
      BLAS_CHECK(cublasSnrm2(handle, kPages, d_change, 1, d_norm));
      BLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
      BLAS_CHECK(cublasGetVectorAsync(1, sizeof(float), d_norm, 1, &change, 1, stream));
      CORPUS_CHECK(cudaStreamSynchronize(stream));
    } else {
      BLAS_CHECK(cublasSnrm2(handle, kPages, d_change, 1, &change));
    }
    BLAS_CHECK(cublasSswap(handle, kPages, d_x, 1, d_y, 1));
    if (change < kTolerance) break;
  }
  out->iterations = iteration;
  BLAS_CHECK(cublasScopy(handle, kPages, d_x, 1, d_column, 1));
  BLAS_CHECK(cublasIsamax(handle, kPages, d_x, 1, &out->top));
  CORPUS_CHECK(cudaStreamSynchronize(stream));
  for (float* p : {d_norm, d_change, d_y, d_x, d_v}) CORPUS_CHECK(cudaFree(p));
  BLAS_CHECK(cublasDestroy(handle));
  CORPUS_CHECK(cudaStreamDestroy(stream));
}

// The same iteration on the host, in double precision.
std::vector<double> HostRank(const std::vector<float>& h, const std::vector<float>& teleport) {
  std::vector<double> x(teleport.begin(), teleport.end()), y(kPages);
  for (int iteration = 0; iteration < 1000; ++iteration) {
    double sum = 0;
    for (int i = 0; i < kPages; ++i) {
      double hx = 0;
      for (int j = 0; j < kPages; ++j) hx += h[i + static_cast<size_t>(j) * kPages] * x[j];
      y[i] = kDamping * hx + (1.0 - kDamping) * teleport[i];
      sum += y[i];
    }
    for (double& value : y) value /= sum;
    x.swap(y);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  CORPUS_CHECK(cudaSetDevice(0));

  // The graph: each page links to 1..6 others drawn from a fixed generator; H(i, j) = 1 /
  // outdegree(j) for a link j -> i (column-stochastic, column-major).
  std::mt19937 graph(2026);
  std::vector<float> h(static_cast<size_t>(kPages) * kPages, 0.0f);
  for (int j = 0; j < kPages; ++j) {
    const int links = 1 + static_cast<int>(graph() % 6);
    for (int l = 0; l < links; ++l) {
      int i = static_cast<int>(graph() % kPages);
      if (i == j) i = (i + 1) % kPages;
      h[i + static_cast<size_t>(j) * kPages] = 1.0f;
    }
    float outdegree = 0;
    for (int i = 0; i < kPages; ++i) outdegree += h[i + static_cast<size_t>(j) * kPages];
    for (int i = 0; i < kPages; ++i) h[i + static_cast<size_t>(j) * kPages] /= outdegree;
  }
  float* d_h;
  CORPUS_CHECK(cudaMalloc(&d_h, static_cast<size_t>(kLd) * kPages * sizeof(float)));
  BLAS_CHECK(cublasSetMatrix(kPages, kPages, sizeof(float), h.data(), kPages, d_h, kLd));
  // A synchronous copy from pageable memory returns once the rows are staged, not once they are
  // on the device (CUDA's "API synchronization behavior"), and the workers' streams do not wait
  // for the legacy stream: without this, a worker may read H half-written.
  CORPUS_CHECK(cudaDeviceSynchronize());

  // Ranking 0 restarts at the first eight pages; ranking 1 at sixteen pages of its own choice.
  std::vector<std::vector<float>> teleports(kRankings, std::vector<float>(kPages, 0.0f));
  for (int i = 0; i < 8; ++i) teleports[0][i] = 1.0f / 8;
  std::mt19937 restarts(7);
  if (plant) restarts.seed(std::random_device{}());
  for (int chosen = 0; chosen < 16;) {
    const int page = static_cast<int>(restarts() % kPages);
    if (teleports[1][page] == 0.0f) {
      teleports[1][page] = 1.0f / 16;
      ++chosen;
    }
  }

  float* d_rankings;  // X: one column per ranking
  CORPUS_CHECK(cudaMalloc(&d_rankings, static_cast<size_t>(kPages) * kRankings * sizeof(float)));
  std::vector<Ranking> rankings(kRankings);
  std::vector<std::thread> workers;
  for (int w = 0; w < kRankings; ++w) {
    workers.emplace_back(Rank, d_h, std::cref(teleports[w]), w == 1,
                         d_rankings + static_cast<size_t>(w) * kPages, &rankings[w]);
  }
  for (std::thread& worker : workers) worker.join();

  // X transposed: one row per ranking, read back in one piece.
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  float* d_rows;
  CORPUS_CHECK(cudaMalloc(&d_rows, static_cast<size_t>(kPages) * kRankings * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  BLAS_CHECK(cublasSgeam(handle, CUBLAS_OP_T, CUBLAS_OP_T, kRankings, kPages, &one, d_rankings,
                         kPages, &zero, d_rankings, kPages, d_rows, kRankings));
  std::vector<float> rows(static_cast<size_t>(kPages) * kRankings);
  BLAS_CHECK(
      cublasGetMatrix(kRankings, kPages, sizeof(float), d_rows, kRankings, rows.data(), kRankings));

  for (int w = 0; w < kRankings; ++w) {
    const std::vector<double> expected = HostRank(h, teleports[w]);
    double worst = 0;
    int top = 0;
    for (int i = 0; i < kPages; ++i) {
      const float rank = rows[w + static_cast<size_t>(i) * kRankings];
      worst = std::fmax(worst, std::fabs(rank - expected[i]));
      if (rank > rows[w + static_cast<size_t>(top) * kRankings]) top = i;
    }
    if (worst > 1e-4 || rankings[w].top != top + 1) {
      std::fprintf(stderr,
                   "ranking %d: off by %.3g from the host's after %d iterations; top page "
                   "%d on the device, %d on the host\n",
                   w, worst, rankings[w].iterations, rankings[w].top, top + 1);
      return 1;
    }
    std::printf("ranking %d: %d iterations, top page %d\n", w, rankings[w].iterations,
                rankings[w].top);
  }
  ndt::programs::PrintChecksum(rows.data(), rows.size() * sizeof(float));
  CORPUS_CHECK(cudaFree(d_rows));
  CORPUS_CHECK(cudaFree(d_rankings));
  CORPUS_CHECK(cudaFree(d_h));
  BLAS_CHECK(cublasDestroy(handle));
  return 0;
}
