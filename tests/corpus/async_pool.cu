// async_pool: stream-ordered allocation as PyTorch's cudaMallocAsync backend
// (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) drives it: the device's default pool with its
// release threshold raised to keep freed memory (cudaMemPoolSetAttribute), two worker threads,
// each with its own non-blocking stream, allocating inputs and per-step outputs with
// cudaMallocAsync (freed memory handed out again across streams in racing order), running
// CorpusColumnDot and CorpusAxpby, copying each step's result to the host and freeing with
// cudaFreeAsync; the pool's usage is read back at the end (cudaMemPoolGetAttribute) and trimmed,
// as torch.cuda.memory_stats() and empty_cache() do.
// --plant: worker 0 accumulates with CorpusColumnDotAtomic (float atomicAdd in racing order).
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  constexpr int kRows = 64, kCols = 32, kSteps = 8, kWorkers = 2;
  const std::vector<float> m = corpus::MixedValues(kRows * kCols, 3);
  const std::vector<float> v = corpus::MixedValues(kRows, 4);
  cudaMemPool_t pool;
  CORPUS_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  CORPUS_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  std::vector<float> results(kWorkers * kSteps * kCols);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      cudaStream_t s;
      CORPUS_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      float *dm, *dv, *out;
      CORPUS_CHECK(cudaMallocAsync(&dm, kRows * kCols * sizeof(float), s));
      CORPUS_CHECK(cudaMallocAsync(&dv, kRows * sizeof(float), s));
      CORPUS_CHECK(
          cudaMemcpyAsync(dm, m.data(), m.size() * sizeof(float), cudaMemcpyHostToDevice, s));
      CORPUS_CHECK(
          cudaMemcpyAsync(dv, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s));
      for (int step = 0; step < kSteps; ++step) {
        CORPUS_CHECK(cudaMallocAsync(&out, kCols * sizeof(float), s));
        if (plant && w == 0) {
          CORPUS_CHECK(cudaMemsetAsync(out, 0, kCols * sizeof(float), s));
          CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, s>>>(
              dm, dv, out, kRows, kCols);
        } else {
          CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, s>>>(dm, dv, out, kRows,
                                                                             kCols);
        }
        CorpusAxpby<<<corpus::Blocks(kRows), corpus::kThreads, 0, s>>>(0.5f, dv, 0.5f, dv, kRows);
        CORPUS_CHECK(cudaMemcpyAsync(&results[(w * kSteps + step) * kCols], out,
                                     kCols * sizeof(float), cudaMemcpyDeviceToHost, s));
        CORPUS_CHECK(cudaFreeAsync(out, s));
      }
      CORPUS_CHECK(cudaFreeAsync(dm, s));
      CORPUS_CHECK(cudaFreeAsync(dv, s));
      CORPUS_CHECK(cudaStreamSynchronize(s));
      CORPUS_CHECK(cudaStreamDestroy(s));
    });
  }
  for (auto& t : workers) t.join();
  cuuint64_t used = 1;
  CORPUS_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  if (used != 0) {
    std::fprintf(stderr, "the pool still has %llu bytes in use\n",
                 static_cast<unsigned long long>(used));
    return 1;
  }
  CORPUS_CHECK(cudaMemPoolTrimTo(pool, 0));
  ndt::programs::PrintChecksum(results.data(), results.size() * sizeof(float));
  return 0;
}
