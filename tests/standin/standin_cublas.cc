// The stand-in libcublas.so.13: the handle functions, GEMMs in single and double precision
// (cublasSgemm_v2, cublasDgemm_v2, their batched forms, cublasGemmEx with 32-bit or 64-bit float
// data), level-1 calls (axpy, scal, dot, nrm2, asum, amax and amin, copy, swap), gemv and geam
// in both, and the host/device helpers (cublasSetMatrix, cublasGetVector, ...), on the host,
// for the test programs (README.md, "The stand-in cuBLAS").
//
// Like the real library it reaches the driver only through dlopen("libcuda.so.1") and
// cuGetProcAddress_v2, and synchronises the handle's stream before it computes: device memory
// is host memory on the stand-in device, so the "kernel" is a host loop run after the work
// before it on the stream has finished.
//
// Which algorithm runs:
//  - atomics allowed (cublasSetAtomicsMode): a split-K over 4 threads whose partial sums are
//    added into C with float compare-and-swap loops in racing order -> nondeterministic bits;
//  - CUBLAS_GEMM_ALGO<i> / ALGO<i>_TENSOR_OP: a split-K over 1 + i % 4 slices of k, the partial
//    sums added in slice order -> deterministic, but different algos give different bits;
//  - CUBLAS_GEMM_DEFAULT[_TENSOR_OP] and cublasSgemm_v2: one pass over k -> deterministic;
//  - CUBLAS_GEMM_AUTOTUNE: "benchmarks" ALGO0..3 and keeps one, chosen by std::random_device
//    (the timing noise of a real benchmark), per handle -> the choice differs run to run.
#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <latch>
#include <new>
#include <random>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "standin_activity.h"
#include "standin_atomic.h"
#include "standin_cublas_status.h"
#include "standin_half.h"
#include "standin_library_driver.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  int autotuned_algo = -2;  // -2: not benchmarked yet
};

namespace {

// The bytes a column-major rows x cols matrix of T with leading dimension ld spans.
template <typename T>
size_t Extent(int rows, int cols, int ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return (static_cast<size_t>(cols - 1) * static_cast<size_t>(ld) + static_cast<size_t>(rows)) *
         sizeof(T);
}

using ndt::standin::BFloat16;
using ndt::standin::Half;

// The type a GEMM of `In` elements computes and takes alpha and beta in: float for the 16-bit
// types (cublasGemmEx with CUBLAS_COMPUTE_32F, as PyTorch's half and bfloat16 matmuls call it).
template <typename In>
using ComputeOf =
    std::conditional_t<std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>, float, In>;

template <typename C, typename S>
C Widen(S x) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return ndt::standin::ToFloat(x);
  } else {
    return x;
  }
}

template <typename S, typename C>
S Narrow(C x) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return ndt::standin::FromFloat<S>(x);
  } else {
    return x;
  }
}

// One GEMM: A and B of `In` elements (float: S, double: D, Half or BFloat16: cublasGemmEx's 16F
// and 16BF), C of `Out` elements, computed in C = ComputeOf<In> and rounded to `Out` once.
template <typename In, typename Out = In>
struct Gemm {
  using C = ComputeOf<In>;
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  const In* a = nullptr;
  int lda = 0;
  const In* b = nullptr;
  int ldb = 0;
  Out* c = nullptr;
  int ldc = 0;
  C alpha = 1;
  C beta = 0;

  C A(int i, int l) const {
    return Widen<C>(trans_a ? a[l + static_cast<size_t>(i) * lda]
                            : a[i + static_cast<size_t>(l) * lda]);
  }
  C B(int l, int j) const {
    return Widen<C>(trans_b ? b[j + static_cast<size_t>(l) * ldb]
                            : b[l + static_cast<size_t>(j) * ldb]);
  }
  // sum over l in [k0, k1) of op(A)(i, l) * op(B)(l, j), in order.
  C Partial(int i, int j, int k0, int k1) const {
    C sum = 0;
    for (int l = k0; l < k1; ++l) sum += A(i, l) * B(l, j);
    return sum;
  }
  int SliceBegin(int slice, int slices) const {
    return static_cast<int>(static_cast<int64_t>(k) * slice / slices);
  }
  void Store(int i, int j, C product) const {
    Out& cell = c[i + static_cast<size_t>(j) * ldc];
    cell = Narrow<Out>(beta == 0 ? alpha * product : alpha * product + beta * Widen<C>(cell));
  }
};

// Split-K with `slices` slices of k whose partial sums are added in slice order.
template <typename G>
void RunOrdered(const G& g, int slices) {
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) {
      typename G::C total = 0;
      for (int s = 0; s < slices; ++s) {
        total += g.Partial(i, j, g.SliceBegin(s, slices), g.SliceBegin(s + 1, slices));
      }
      g.Store(i, j, total);
    }
  }
}

using ndt::standin::AtomicAdd;

// Split-K over kRacingSlices threads that add their partial sums into one accumulator per
// cell with atomic float additions, in whatever order the race gives. Each thread yields after
// a random number of additions so that the order differs from run to run even on one core.
constexpr int kRacingSlices = 4;
constexpr unsigned kMaxAddsBetweenYields = 16;

template <typename G>
void RunRacing(const G& g) {
  using T = typename G::C;
  const size_t cells = static_cast<size_t>(g.m) * static_cast<size_t>(g.n);
  std::vector<T> accumulator(cells, T{0});
  auto slice = [&g, &accumulator, cells](int s) {
    std::vector<T> partial(cells);
    const int k0 = g.SliceBegin(s, kRacingSlices), k1 = g.SliceBegin(s + 1, kRacingSlices);
    for (int j = 0; j < g.n; ++j) {
      for (int i = 0; i < g.m; ++i)
        partial[i + static_cast<size_t>(j) * g.m] = g.Partial(i, j, k0, k1);
    }
    std::minstd_rand random(std::random_device{}());
    unsigned until_yield = random() % kMaxAddsBetweenYields + 1;
    for (size_t cell = 0; cell < cells; ++cell) {
      AtomicAdd(&accumulator[cell], partial[cell]);
      if (--until_yield == 0) {
        std::this_thread::yield();
        until_yield = random() % kMaxAddsBetweenYields + 1;
      }
    }
  };
  std::latch start(kRacingSlices);
  std::vector<int> not_started;
  {
    std::vector<std::jthread> threads;
    for (int s = 0; s < kRacingSlices; ++s) {
      try {
        threads.emplace_back([&start, &slice, s] {
          start.arrive_and_wait();
          slice(s);
        });
      } catch (const std::system_error&) {
        not_started.push_back(s);
        start.count_down();
      }
    }
  }
  for (int s : not_started) slice(s);
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) g.Store(i, j, accumulator[i + static_cast<size_t>(j) * g.m]);
  }
}

bool ValidOperation(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// The slices an explicit algo splits k into; 0 for an algo id the library does not know.
int SlicesOf(int algo) {
  if (algo == CUBLAS_GEMM_DEFAULT || algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP) return 1;
  if (algo >= CUBLAS_GEMM_ALGO0 && algo <= CUBLAS_GEMM_ALGO23) return 1 + algo % 4;
  if (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) {
    return 1 + (algo - CUBLAS_GEMM_ALGO0_TENSOR_OP) % 4;
  }
  return 0;
}

template <typename In, typename Out = In>
cublasStatus_t RunGemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                       int m, int n, int k, const void* alpha, const void* a, int lda,
                       const void* b, int ldb, const void* beta, void* c, int ldc, int algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ValidOperation(transa) || !ValidOperation(transb) || m < 0 || n < 0 || k < 0 ||
      alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Gemm<In, Out> g;
  using C = typename Gemm<In, Out>::C;
  g.trans_a = transa != CUBLAS_OP_N;
  g.trans_b = transb != CUBLAS_OP_N;
  g.m = m;
  g.n = n;
  g.k = k;
  const int a_rows = g.trans_a ? k : m, b_rows = g.trans_b ? n : k;
  if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) ||
      ldc < (m > 1 ? m : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (algo == CUBLAS_GEMM_AUTOTUNE) {
    if (handle->autotuned_algo == -2) {
      handle->autotuned_algo = static_cast<int>(std::random_device{}() % 4);
    }
    algo = handle->autotuned_algo;
  }
  const int slices = SlicesOf(algo);
  if (slices == 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!Synchronize(handle->stream)) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
    if (!IsDeviceRange(alpha, sizeof(C)) || !IsDeviceRange(beta, sizeof(C))) {
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  std::memcpy(&g.alpha, alpha, sizeof(C));
  std::memcpy(&g.beta, beta, sizeof(C));
  const size_t a_bytes = Extent<In>(a_rows, g.trans_a ? m : k, lda);
  const size_t b_bytes = Extent<In>(b_rows, g.trans_b ? k : n, ldb);
  if ((a_bytes > 0 && !IsDeviceRange(a, a_bytes)) || (b_bytes > 0 && !IsDeviceRange(b, b_bytes)) ||
      !IsDeviceRange(c, Extent<Out>(m, n, ldc))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  g.a = static_cast<const In*>(a);
  g.lda = lda;
  g.b = static_cast<const In*>(b);
  g.ldb = ldb;
  g.c = static_cast<Out*>(c);
  g.ldc = ldc;
  const LibraryParams params{
      {a, b, c}, static_cast<uint32_t>(m), static_cast<uint32_t>(n), static_cast<uint32_t>(k)};
  LaunchLibraryKernel(handle->stream, params);
  // A split-K algorithm launches a second kernel, the reduction of its slices, as cuBLAS's do:
  // how many kernels a GEMM launches inside its call depends on the algorithm chosen.
  if (slices > 1) LaunchLibraryKernel(handle->stream, params);
  try {
    AsKernel(handle->stream, [&] {
      if (handle->atomics == CUBLAS_ATOMICS_ALLOWED && k >= kRacingSlices) {
        RunRacing(g);
      } else {
        RunOrdered(g, slices);
      }
    });
  } catch (const std::bad_alloc&) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// A scalar argument (alpha, beta) read in the handle's pointer mode: host memory, or device
// memory (after the stream is synchronised, so its earlier writes are there).
template <typename T>
bool ReadScalar(cublasHandle_t handle, const T* p, T* out) {
  if (p == nullptr) return false;
  if (handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE && !IsDeviceRange(p, sizeof(T))) {
    return false;
  }
  std::memcpy(out, p, sizeof(T));
  return true;
}

// The bytes a BLAS vector of n elements of T with increment inc spans, and its element i
// (negative increments walk backwards from the far end, as BLAS defines).
template <typename T>
size_t VectorBytes(int n, int inc) {
  if (n <= 0) return 0;
  const size_t step = static_cast<size_t>(inc < 0 ? -static_cast<int64_t>(inc) : inc);
  return (static_cast<size_t>(n - 1) * step + 1) * sizeof(T);
}

size_t VectorIndex(int i, int n, int inc) {
  return inc >= 0 ? static_cast<size_t>(i) * static_cast<size_t>(inc)
                  : static_cast<size_t>(n - 1 - i) * static_cast<size_t>(-static_cast<int64_t>(inc));
}

// The level-1 and level-2 calls: validate, synchronise the stream, check ranges, compute in a
// fixed order (deterministic).
cublasStatus_t Prepare(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return Synchronize(handle->stream) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

template <typename In, typename Out = In>
cublasStatus_t RunStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                 cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                 const In* a, int lda, long long stride_a, const In* b, int ldb,
                                 long long stride_b, const void* beta, Out* c, int ldc,
                                 long long stride_c, int batch_count, int algo) {
  if (batch_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batch_count; ++i) {
    const cublasStatus_t status =
        RunGemm<In, Out>(handle, transa, transb, m, n, k, alpha, a + i * stride_a, lda,
                         b + i * stride_b, ldb, beta, c + i * stride_c, ldc, algo);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Calls run.template operator()<In, Out>() with the element types of A and B (`In`) and of C
// (`Out`) for cublasGemmEx's and cublasGemmStridedBatchedEx's data types and compute type:
// f32 with a 32-bit float compute type; f64 with CUBLAS_COMPUTE_64F[_PEDANTIC]; f16 or bf16 A
// and B with a 32-bit float compute type and C of their type or f32 (PyTorch's half and
// bfloat16 matmuls). CUBLAS_STATUS_NOT_SUPPORTED for the rest.
template <typename Run>
cublasStatus_t WithExTypes(cudaDataType a, cudaDataType b, cudaDataType c,
                           cublasComputeType_t compute, Run run) {
  const bool f32_compute =
      compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
      compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16F ||
      compute == CUBLAS_COMPUTE_32F_FAST_16BF;
  if (a != b) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a == CUDA_R_32F && c == CUDA_R_32F && f32_compute) {
    return run.template operator()<float, float>();
  }
  if (a == CUDA_R_64F && c == CUDA_R_64F &&
      (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC)) {
    return run.template operator()<double, double>();
  }
  if (a == CUDA_R_16F && f32_compute) {
    if (c == CUDA_R_16F) return run.template operator()<Half, Half>();
    if (c == CUDA_R_32F) return run.template operator()<Half, float>();
  }
  if (a == CUDA_R_16BF && f32_compute) {
    if (c == CUDA_R_16BF) return run.template operator()<BFloat16, BFloat16>();
    if (c == CUDA_R_32F) return run.template operator()<BFloat16, float>();
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// y = alpha x + y, element by element.
template <typename T>
cublasStatus_t Axpy(cublasHandle_t handle, int n, const T* alpha, const T* x, int incx, T* y,
                    int incy) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
  T a = 0;
  if (!ReadScalar(handle, alpha, &a)) return CUBLAS_STATUS_INVALID_VALUE;
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;
  if (!IsDeviceRange(x, VectorBytes<T>(n, incx)) || !IsDeviceRange(y, VectorBytes<T>(n, incy))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  for (int i = 0; i < n; ++i) y[VectorIndex(i, n, incy)] += a * x[VectorIndex(i, n, incx)];
  return CUBLAS_STATUS_SUCCESS;
}

// x = alpha x.
template <typename T>
cublasStatus_t Scal(cublasHandle_t handle, int n, const T* alpha, T* x, int incx) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  T a = 0;
  if (!ReadScalar(handle, alpha, &a)) return CUBLAS_STATUS_INVALID_VALUE;
  if (n <= 0 || incx <= 0) return CUBLAS_STATUS_SUCCESS;  // BLAS: nothing to do
  if (!IsDeviceRange(x, VectorBytes<T>(n, incx))) return CUBLAS_STATUS_EXECUTION_FAILED;
  for (int i = 0; i < n; ++i) x[static_cast<size_t>(i) * incx] *= a;
  return CUBLAS_STATUS_SUCCESS;
}

// The dot product, summed in 4 interleaved partial sums then added in order (a fixed tree, as
// the real library's reduction is); the result goes to host or device memory by pointer mode.
template <typename T>
cublasStatus_t Dot(cublasHandle_t handle, int n, const T* x, int incx, const T* y, int incy,
                   T* result) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE && !IsDeviceRange(result, sizeof(T))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  T partial[4] = {0, 0, 0, 0};
  if (n > 0) {
    if (incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (!IsDeviceRange(x, VectorBytes<T>(n, incx)) || !IsDeviceRange(y, VectorBytes<T>(n, incy))) {
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    for (int i = 0; i < n; ++i) {
      partial[i % 4] += x[VectorIndex(i, n, incx)] * y[VectorIndex(i, n, incy)];
    }
  }
  const T total = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  std::memcpy(result, &total, sizeof(total));
  return CUBLAS_STATUS_SUCCESS;
}

// y = alpha op(A) x + beta y, A column-major m x n.
template <typename T>
cublasStatus_t Gemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const T* alpha,
                    const T* a, int lda, const T* x, int incx, const T* beta, T* y, int incy) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (!ValidOperation(trans) || m < 0 || n < 0 || lda < (m > 1 ? m : 1) || incx == 0 || incy == 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  T al = 0;
  T be = 0;
  if (!ReadScalar(handle, alpha, &al) || !ReadScalar(handle, beta, &be)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const bool t = trans != CUBLAS_OP_N;
  const int x_len = t ? m : n, y_len = t ? n : m;
  if (!IsDeviceRange(a, Extent<T>(m, n, lda)) || !IsDeviceRange(x, VectorBytes<T>(x_len, incx)) ||
      !IsDeviceRange(y, VectorBytes<T>(y_len, incy))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  for (int r = 0; r < y_len; ++r) {
    T sum = 0;
    for (int l = 0; l < x_len; ++l) {
      const T element =
          t ? a[l + static_cast<size_t>(r) * lda] : a[r + static_cast<size_t>(l) * lda];
      sum += element * x[VectorIndex(l, x_len, incx)];
    }
    T& out = y[VectorIndex(r, y_len, incy)];
    out = be == 0 ? al * sum : al * sum + be * out;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The pointer arrays are device memory, read after the stream is synchronised.
template <typename T>
cublasStatus_t Batched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                       int m, int n, int k, const T* alpha, const T* const Aarray[], int lda,
                       const T* const Barray[], int ldb, const T* beta, T* const Carray[], int ldc,
                       int batchCount) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t bytes = static_cast<size_t>(batchCount) * sizeof(void*);
  if (!IsDeviceRange(Aarray, bytes) || !IsDeviceRange(Barray, bytes) ||
      !IsDeviceRange(Carray, bytes)) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  for (int i = 0; i < batchCount; ++i) {
    const cublasStatus_t status =
        RunGemm<T>(handle, transa, transb, m, n, k, alpha, Aarray[i], lda, Barray[i], ldb, beta,
                   Carray[i], ldc, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// A reduction's result (nrm2, asum, the index of amax and amin), written to host or device
// memory by the handle's pointer mode, as the dot product's is.
template <typename R>
cublasStatus_t ReturnResult(cublasHandle_t handle, R* result, R value) {
  if (result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE && !IsDeviceRange(result, sizeof(R))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  std::memcpy(result, &value, sizeof(value));
  return CUBLAS_STATUS_SUCCESS;
}

// sum over i of f(x_i), in 4 interleaved partial sums added in order (the dot product's tree).
// BLAS: nothing is read, and the sum is 0, for n <= 0 or incx <= 0.
template <typename T, typename F>
cublasStatus_t SumOf(cublasHandle_t handle, int n, const T* x, int incx, F f, T* sum) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  T partial[4] = {0, 0, 0, 0};
  if (n > 0 && incx > 0) {
    if (!IsDeviceRange(x, VectorBytes<T>(n, incx))) return CUBLAS_STATUS_EXECUTION_FAILED;
    for (int i = 0; i < n; ++i) partial[i % 4] += f(x[static_cast<size_t>(i) * incx]);
  }
  *sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  return CUBLAS_STATUS_SUCCESS;
}

// The Euclidean norm (sum of squares, then the square root) and the sum of magnitudes.
template <typename T>
cublasStatus_t Nrm2(cublasHandle_t handle, int n, const T* x, int incx, T* result) {
  T sum = 0;
  const cublasStatus_t status = SumOf(
      handle, n, x, incx, [](T v) { return v * v; }, &sum);
  return status == CUBLAS_STATUS_SUCCESS ? ReturnResult(handle, result, std::sqrt(sum)) : status;
}

template <typename T>
cublasStatus_t Asum(cublasHandle_t handle, int n, const T* x, int incx, T* result) {
  T sum = 0;
  const cublasStatus_t status = SumOf(
      handle, n, x, incx, [](T v) { return std::abs(v); }, &sum);
  return status == CUBLAS_STATUS_SUCCESS ? ReturnResult(handle, result, sum) : status;
}

// The 1-based index of the first element of largest (amax) or smallest (amin) magnitude; 0 for
// n <= 0 or incx <= 0.
template <typename T>
cublasStatus_t Iamax(cublasHandle_t handle, int n, const T* x, int incx, int* result, bool max) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  int index = 0;
  if (n > 0 && incx > 0) {
    if (!IsDeviceRange(x, VectorBytes<T>(n, incx))) return CUBLAS_STATUS_EXECUTION_FAILED;
    T best = std::abs(x[0]);
    index = 1;
    for (int i = 1; i < n; ++i) {
      const T v = std::abs(x[static_cast<size_t>(i) * incx]);
      if (max ? v > best : v < best) {
        best = v;
        index = i + 1;
      }
    }
  }
  return ReturnResult(handle, result, index);
}

// y = x (copy), or x and y exchanged (swap).
template <typename T>
cublasStatus_t CopyOrSwap(cublasHandle_t handle, int n, T* x, int incx, T* y, int incy, bool swap) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;
  if (incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!IsDeviceRange(x, VectorBytes<T>(n, incx)) || !IsDeviceRange(y, VectorBytes<T>(n, incy))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  for (int i = 0; i < n; ++i) {
    T& to = y[VectorIndex(i, n, incy)];
    T& from = x[VectorIndex(i, n, incx)];
    if (swap) {
      std::swap(to, from);
    } else {
      to = from;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) + beta op(B), all m x n after op: out of place, or in place (C is A or B).
// A is not read when alpha is 0, nor B when beta is 0.
template <typename T>
cublasStatus_t Geam(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                    int m, int n, const T* alpha, const T* a, int lda, const T* beta, const T* b,
                    int ldb, T* c, int ldc) {
  if (const cublasStatus_t status = Prepare(handle); status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const int a_rows = ta ? n : m, b_rows = tb ? n : m;
  if (!ValidOperation(transa) || !ValidOperation(transb) || m < 0 || n < 0 ||
      lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  T al = 0, be = 0;
  if (!ReadScalar(handle, alpha, &al) || !ReadScalar(handle, beta, &be)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if ((al != 0 && !IsDeviceRange(a, Extent<T>(a_rows, ta ? m : n, lda))) ||
      (be != 0 && !IsDeviceRange(b, Extent<T>(b_rows, tb ? m : n, ldb))) ||
      !IsDeviceRange(c, Extent<T>(m, n, ldc))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  std::vector<T> result(static_cast<size_t>(m) * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      T v = 0;
      if (al != 0)
        v += al * (ta ? a[j + static_cast<size_t>(i) * lda] : a[i + static_cast<size_t>(j) * lda]);
      if (be != 0)
        v += be * (tb ? b[j + static_cast<size_t>(i) * ldb] : b[i + static_cast<size_t>(j) * ldb]);
      result[i + static_cast<size_t>(j) * m] = v;
    }
  }
  for (int j = 0; j < n; ++j) {
    std::memcpy(c + static_cast<size_t>(j) * ldc, result.data() + static_cast<size_t>(j) * m,
                static_cast<size_t>(m) * sizeof(T));
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The helpers that move matrices and vectors between host and device (cublasSetMatrix and
// the rest): `height` rows of `width` bytes, `src_pitch` and `dst_pitch` apart, as one copy
// through the driver (cuMemcpy2D, or cuMemcpy2DAsync on `stream`), which a tracer sees as it
// sees cudart's. CUBLAS_STATUS_MAPPING_ERROR when the driver refuses it.
cublasStatus_t Transfer(bool to_device, const void* src, size_t src_pitch, void* dst,
                        size_t dst_pitch, size_t width, size_t height, const cudaStream_t* stream) {
  if (width == 0 || height == 0) return CUBLAS_STATUS_SUCCESS;
  const Driver& driver = TheDriver();
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = to_device ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  copy.dstMemoryType = to_device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
  if (to_device) {
    copy.srcHost = src;
    copy.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  } else {
    copy.srcDevice = reinterpret_cast<CUdeviceptr>(src);
    copy.dstHost = dst;
  }
  copy.srcPitch = src_pitch;
  copy.dstPitch = dst_pitch;
  copy.WidthInBytes = width;
  copy.Height = height;
  const CUresult result =
      stream == nullptr ? (driver.memcpy_2d ? driver.memcpy_2d(&copy) : CUDA_ERROR_NOT_SUPPORTED)
                        : (driver.memcpy_2d_async
                               ? driver.memcpy_2d_async(&copy, reinterpret_cast<CUstream>(*stream))
                               : CUDA_ERROR_NOT_SUPPORTED);
  return result == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_MAPPING_ERROR;
}

// A rows x cols matrix of elem_size-byte elements, column-major, leading dimensions lda (source)
// and ldb (destination).
cublasStatus_t TransferMatrix(bool to_device, int rows, int cols, int elem_size, const void* a,
                              int lda, void* b, int ldb, const cudaStream_t* stream) {
  if (rows < 0 || cols < 0 || elem_size <= 0 || lda <= 0 || ldb <= 0 || lda < rows || ldb < rows) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const auto size = static_cast<size_t>(elem_size);
  if (lda == rows && ldb == rows) {  // contiguous: one row of every column
    return Transfer(to_device, a, 0, b, 0, size * rows * cols, 1, stream);
  }
  return Transfer(to_device, a, size * lda, b, size * ldb, size * rows, cols, stream);
}

// n elements of elem_size bytes, incx apart in the source and incy in the destination.
cublasStatus_t TransferVector(bool to_device, int n, int elem_size, const void* x, int incx,
                              void* y, int incy, const cudaStream_t* stream) {
  if (n < 0 || elem_size <= 0 || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  const auto size = static_cast<size_t>(elem_size);
  if (incx == 1 && incy == 1) return Transfer(to_device, x, 0, y, 0, size * n, 1, stream);
  return Transfer(to_device, x, size * incx, y, size * incy, size, n, stream);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (TheDriver().stream_synchronize == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new (std::nothrow) cublasContext();
  return *handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  return ndt::standin::CublasStatusName(status);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return ndt::standin::CublasStatusString(status);
}

size_t cublasGetCudartVersion(void) {
  return CUDA_VERSION;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  return ndt::standin::CublasProperty(type, value);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  // As in the real library: a new stream resets the workspace to the library's default.
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes > 0 && !IsDeviceRange(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->atomics = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->atomics;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  return RunGemm<float>(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                        CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const double* alpha,
                              const double* a, int lda, const double* b, int ldb,
                              const double* beta, double* c, int ldc) {
  return RunGemm<double>(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                         CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute_type,
                            cublasGemmAlgo_t algo) {
  return WithExTypes(a_type, b_type, c_type, compute_type, [&]<typename In, typename Out>() {
    return RunGemm<In, Out>(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                            algo);
  });
}

cublasStatus_t cublasSaxpy_v2(cublasHandle_t handle, int n, const float* alpha, const float* x,
                              int incx, float* y, int incy) {
  return Axpy(handle, n, alpha, x, incx, y, incy);
}

cublasStatus_t cublasDaxpy_v2(cublasHandle_t handle, int n, const double* alpha, const double* x,
                              int incx, double* y, int incy) {
  return Axpy(handle, n, alpha, x, incx, y, incy);
}

cublasStatus_t cublasSscal_v2(cublasHandle_t handle, int n, const float* alpha, float* x,
                              int incx) {
  return Scal(handle, n, alpha, x, incx);
}

cublasStatus_t cublasDscal_v2(cublasHandle_t handle, int n, const double* alpha, double* x,
                              int incx) {
  return Scal(handle, n, alpha, x, incx);
}

cublasStatus_t cublasSdot_v2(cublasHandle_t handle, int n, const float* x, int incx,
                             const float* y, int incy, float* result) {
  return Dot(handle, n, x, incx, y, incy, result);
}

cublasStatus_t cublasDdot_v2(cublasHandle_t handle, int n, const double* x, int incx,
                             const double* y, int incy, double* result) {
  return Dot(handle, n, x, incx, y, incy, result);
}

cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                              const float* alpha, const float* a, int lda, const float* x,
                              int incx, const float* beta, float* y, int incy) {
  return Gemv(handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

cublasStatus_t cublasDgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                              const double* alpha, const double* a, int lda, const double* x,
                              int incx, const double* beta, double* y, int incy) {
  return Gemv(handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* a, int lda,
                                         long long int strideA, const float* b, int ldb,
                                         long long int strideB, const float* beta, float* c,
                                         int ldc, long long int strideC, int batchCount) {
  return RunStridedBatched(handle, transa, transb, m, n, k, alpha, a, lda, strideA, b, ldb,
                           strideB, beta, c, ldc, strideC, batchCount, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double* alpha, const double* a, int lda,
                                         long long int strideA, const double* b, int ldb,
                                         long long int strideB, const double* beta, double* c,
                                         int ldc, long long int strideC, int batchCount) {
  return RunStridedBatched(handle, transa, transb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB,
                           beta, c, ldc, strideC, batchCount, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float* alpha, const float* const Aarray[], int lda,
                                  const float* const Barray[], int ldb, const float* beta,
                                  float* const Carray[], int ldc, int batchCount) {
  return Batched(handle, transa, transb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray,
                 ldc, batchCount);
}

cublasStatus_t cublasDgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const double* alpha, const double* const Aarray[], int lda,
                                  const double* const Barray[], int ldb, const double* beta,
                                  double* const Carray[], int ldc, int batchCount) {
  return Batched(handle, transa, transb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray,
                 ldc, batchCount);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return WithExTypes(Atype, Btype, Ctype, computeType, [&]<typename In, typename Out>() {
    return RunStridedBatched(handle, transa, transb, m, n, k, alpha, static_cast<const In*>(A), lda,
                             strideA, static_cast<const In*>(B), ldb, strideB, beta,
                             static_cast<Out*>(C), ldc, strideC, batchCount, algo);
  });
}

// Level 1: norms, sums of magnitudes, indices of extremes, copies and swaps; geam.
cublasStatus_t cublasSnrm2_v2(cublasHandle_t handle, int n, const float* x, int incx,
                              float* result) {
  return Nrm2(handle, n, x, incx, result);
}

cublasStatus_t cublasDnrm2_v2(cublasHandle_t handle, int n, const double* x, int incx,
                              double* result) {
  return Nrm2(handle, n, x, incx, result);
}

cublasStatus_t cublasSasum_v2(cublasHandle_t handle, int n, const float* x, int incx,
                              float* result) {
  return Asum(handle, n, x, incx, result);
}

cublasStatus_t cublasDasum_v2(cublasHandle_t handle, int n, const double* x, int incx,
                              double* result) {
  return Asum(handle, n, x, incx, result);
}

cublasStatus_t cublasIsamax_v2(cublasHandle_t handle, int n, const float* x, int incx,
                               int* result) {
  return Iamax(handle, n, x, incx, result, true);
}

cublasStatus_t cublasIdamax_v2(cublasHandle_t handle, int n, const double* x, int incx,
                               int* result) {
  return Iamax(handle, n, x, incx, result, true);
}

cublasStatus_t cublasIsamin_v2(cublasHandle_t handle, int n, const float* x, int incx,
                               int* result) {
  return Iamax(handle, n, x, incx, result, false);
}

cublasStatus_t cublasIdamin_v2(cublasHandle_t handle, int n, const double* x, int incx,
                               int* result) {
  return Iamax(handle, n, x, incx, result, false);
}

cublasStatus_t cublasScopy_v2(cublasHandle_t handle, int n, const float* x, int incx, float* y,
                              int incy) {
  return CopyOrSwap(handle, n, const_cast<float*>(x), incx, y, incy, false);
}

cublasStatus_t cublasDcopy_v2(cublasHandle_t handle, int n, const double* x, int incx, double* y,
                              int incy) {
  return CopyOrSwap(handle, n, const_cast<double*>(x), incx, y, incy, false);
}

cublasStatus_t cublasSswap_v2(cublasHandle_t handle, int n, float* x, int incx, float* y,
                              int incy) {
  return CopyOrSwap(handle, n, x, incx, y, incy, true);
}

cublasStatus_t cublasDswap_v2(cublasHandle_t handle, int n, double* x, int incx, double* y,
                              int incy) {
  return CopyOrSwap(handle, n, x, incx, y, incy, true);
}

cublasStatus_t cublasSgeam(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, const float* alpha,
                           const float* a, int lda, const float* beta, const float* b, int ldb,
                           float* c, int ldc) {
  return Geam(handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}

cublasStatus_t cublasDgeam(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, const double* alpha,
                           const double* a, int lda, const double* beta, const double* b, int ldb,
                           double* c, int ldc) {
  return Geam(handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}

// The helpers between host and device: the plain ones on the legacy default stream, as
// synchronous copies; the Async ones on the stream given.
cublasStatus_t cublasSetMatrix(int rows, int cols, int elemSize, const void* A, int lda, void* B,
                               int ldb) {
  return TransferMatrix(true, rows, cols, elemSize, A, lda, B, ldb, nullptr);
}

cublasStatus_t cublasGetMatrix(int rows, int cols, int elemSize, const void* A, int lda, void* B,
                               int ldb) {
  return TransferMatrix(false, rows, cols, elemSize, A, lda, B, ldb, nullptr);
}

cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elemSize, const void* A, int lda,
                                    void* B, int ldb, cudaStream_t stream) {
  return TransferMatrix(true, rows, cols, elemSize, A, lda, B, ldb, &stream);
}

cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elemSize, const void* A, int lda,
                                    void* B, int ldb, cudaStream_t stream) {
  return TransferMatrix(false, rows, cols, elemSize, A, lda, B, ldb, &stream);
}

cublasStatus_t cublasSetVector(int n, int elemSize, const void* x, int incx, void* y, int incy) {
  return TransferVector(true, n, elemSize, x, incx, y, incy, nullptr);
}

cublasStatus_t cublasGetVector(int n, int elemSize, const void* x, int incx, void* y, int incy) {
  return TransferVector(false, n, elemSize, x, incx, y, incy, nullptr);
}

cublasStatus_t cublasSetVectorAsync(int n, int elemSize, const void* hostPtr, int incx,
                                    void* devicePtr, int incy, cudaStream_t stream) {
  return TransferVector(true, n, elemSize, hostPtr, incx, devicePtr, incy, &stream);
}

cublasStatus_t cublasGetVectorAsync(int n, int elemSize, const void* devicePtr, int incx,
                                    void* hostPtr, int incy, cudaStream_t stream) {
  return TransferVector(false, n, elemSize, devicePtr, incx, hostPtr, incy, &stream);
}

}  // extern "C"
