// blas_threads: four host threads doing cuBLAS work at once, each with its own handle on its
// own non-blocking stream and a workspace from one shared caching allocator (PyTorch: a handle
// and a workspace per thread and stream), as data-parallel inference threads or a model split
// over streams do. Per thread and iteration: C = A B (cublasSgemm_v2), a strided batched GEMM
// over four 16x16 blocks, y = A x (cublasSgemv_v2), y += 0.5 x (cublasSaxpy_v2), the dot
// product x . y (cublasSdot_v2, result on the host), then, in device pointer mode as solvers keep
// scalars on the GPU, z = (x . y) y (the dot into device memory, cublasSscal_v2 reading it
// there), and per-iteration scratch tensors that go back to the allocator in whatever order the
// threads finish, so addresses differ run to run.
// --plant: cublasSetAtomicsMode(CUBLAS_ATOMICS_ALLOWED) on thread 0's handle, so its GEMMs may
// accumulate split-K partial sums with atomics. --plant-scalar: thread 1 computes the device
// scalar with atomicAdd in racing order (CorpusColumnDotAtomic) instead: cublasSscal_v2 then
// reads another scale in every run, and must not be taken for the nondeterministic op. Every
// product is checked against a double host product within float tolerance.
#include <cublas_v2.h>

#include <cmath>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"
#include "corpus_libraries.h"

namespace {

constexpr int kThreadCount = 4, kIterations = 3, kDim = 64, kBlock = 16, kBatches = 4;

struct ThreadResult {
  std::vector<float> c, batched, y, z;
  std::vector<float> dots;
};

void Work(int t, bool plant, bool plant_scalar, corpus::CachingAllocator& allocator,
          ThreadResult* out) {
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, stream));
  constexpr size_t kWorkspaceBytes = 1 << 20;
  void* workspace = allocator.Allocate(kWorkspaceBytes, stream);
  BLAS_CHECK(cublasSetWorkspace(handle, workspace, kWorkspaceBytes));
  if (plant && t == 0) BLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_ALLOWED));

  const size_t matrix = size_t{kDim} * kDim;
  const std::vector<float> a = corpus::MixedValues(matrix, 100 + t);
  const std::vector<float> b = corpus::MixedValues(matrix, 200 + t);
  const std::vector<float> x = corpus::MixedValues(kDim, 300 + t);
  auto tensor = [&](size_t count) {
    return static_cast<float*>(allocator.Allocate(count * sizeof(float), stream));
  };
  float *d_a = tensor(matrix), *d_b = tensor(matrix), *d_x = tensor(kDim);
  CORPUS_CHECK(cudaMemcpyAsync(d_a, a.data(), matrix * 4, cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_b, b.data(), matrix * 4, cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_x, x.data(), kDim * 4, cudaMemcpyHostToDevice, stream));
  const float one = 1.0f, zero = 0.0f, half = 0.5f;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    float* d_c = tensor(matrix);
    float* d_batched = tensor(size_t{kBatches} * kBlock * kBlock);
    float* d_y = tensor(kDim);
    BLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kDim, kDim, kDim, &one, d_a, kDim,
                           d_b, kDim, &zero, d_c, kDim));
    BLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_T, kBlock, kBlock, kBlock,
                                         &one, d_a, kDim, kBlock, d_b, kDim, kBlock * kDim, &zero,
                                         d_batched, kBlock, kBlock * kBlock, kBatches));
    BLAS_CHECK(cublasSgemv(handle, CUBLAS_OP_N, kDim, kDim, &one, d_c, kDim, d_x, 1, &zero, d_y,
                           1));
    BLAS_CHECK(cublasSaxpy(handle, kDim, &half, d_x, 1, d_y, 1));
    float dot = 0;
    BLAS_CHECK(cublasSdot(handle, kDim, d_x, 1, d_y, 1, &dot));
    // z = (x . y) y with the scale kept in device memory.
    float* d_scale = tensor(1);
    float* d_z = tensor(kDim);
    CORPUS_CHECK(cudaMemcpyAsync(d_z, d_y, kDim * 4, cudaMemcpyDeviceToDevice, stream));
    BLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE));
    if (plant_scalar && t == 1) {
      CORPUS_CHECK(cudaMemsetAsync(d_scale, 0, sizeof(float), stream));
      CorpusColumnDotAtomic<<<corpus::Blocks(kDim), corpus::kThreads, 0, stream>>>(
          d_x, d_y, d_scale, kDim, 1);
      CORPUS_CHECK(cudaGetLastError());
    } else {
      BLAS_CHECK(cublasSdot(handle, kDim, d_x, 1, d_y, 1, d_scale));
    }
    BLAS_CHECK(cublasSscal(handle, kDim, d_scale, d_z, 1));
    BLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
    std::vector<float> c(matrix), batched(size_t{kBatches} * kBlock * kBlock), y(kDim), z(kDim);
    CORPUS_CHECK(cudaMemcpyAsync(c.data(), d_c, matrix * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaMemcpyAsync(batched.data(), d_batched, batched.size() * 4,
                                 cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaMemcpyAsync(y.data(), d_y, kDim * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaMemcpyAsync(z.data(), d_z, kDim * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaStreamSynchronize(stream));
    allocator.Free(d_z);
    allocator.Free(d_scale);
    allocator.Free(d_y);
    allocator.Free(d_batched);
    allocator.Free(d_c);
    if (iteration == kIterations - 1) {
      out->c = c;
      out->batched = batched;
      out->y = y;
      out->z = z;
    }
    out->dots.push_back(dot);
    // The host checks: C against a double product, the dot against the host's.
    for (int j = 0; j < kDim; j += 7) {
      for (int i = 0; i < kDim; i += 5) {
        double exact = 0;
        for (int l = 0; l < kDim; ++l) exact += double(a[i + l * kDim]) * b[l + j * kDim];
        if (std::fabs(c[i + j * kDim] - exact) > 1e-3 * (1 + std::fabs(exact))) {
          std::fprintf(stderr, "thread %d: C[%d,%d] = %.9g, expected %.9g\n", t, i, j,
                       c[i + j * kDim], exact);
          std::exit(1);
        }
      }
    }
    double exact_dot = 0;
    for (int i = 0; i < kDim; ++i) exact_dot += double(x[i]) * y[i];
    if (std::fabs(dot - exact_dot) > 1e-3 * (1 + std::fabs(exact_dot))) {
      std::fprintf(stderr, "thread %d: dot %.9g, expected %.9g\n", t, dot, exact_dot);
      std::exit(1);
    }
    for (int i = 0; i < kDim; ++i) {
      const double expected = exact_dot * y[i];
      if (std::fabs(z[i] - expected) > 1e-3 * (1 + std::fabs(expected))) {
        std::fprintf(stderr, "thread %d: z[%d] = %.9g, expected %.9g\n", t, i, z[i], expected);
        std::exit(1);
      }
    }
  }
  BLAS_CHECK(cublasDestroy(handle));
  CORPUS_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const bool plant_scalar = corpus::HasFlag(argc, argv, "--plant-scalar");
  CORPUS_CHECK(cudaSetDevice(0));
  CORPUS_CHECK(cudaFree(nullptr));  // the context, before the threads (as torch.cuda.init)
  corpus::CachingAllocator allocator;
  std::vector<ThreadResult> results(kThreadCount);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreadCount; ++t) {
    threads.emplace_back(Work, t, plant, plant_scalar, std::ref(allocator), &results[t]);
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<float> all;
  for (const ThreadResult& r : results) {
    all.insert(all.end(), r.c.begin(), r.c.end());
    all.insert(all.end(), r.batched.begin(), r.batched.end());
    all.insert(all.end(), r.y.begin(), r.y.end());
    all.insert(all.end(), r.z.begin(), r.z.end());
    all.insert(all.end(), r.dots.begin(), r.dots.end());
  }
  ndt::programs::PrintChecksum(all.data(), all.size() * sizeof(float));
  return 0;
}
