// gemm: single-precision matrix products through cuBLAS or cuBLASLt, the way frameworks call
// them, for the tracer's cuBLAS tests. Plain C++ against the real headers, linked to the real
// libcudart.so.13, libcublas.so.13 and libcublasLt.so.13.
//
//   gemm [--lt] [--atomics] [--autotune] [--heuristic-noise] [--small-workspace] [ITERATIONS]
//
// Without --lt: one cuBLAS handle on a created stream, cublasSgemm_v2 (C = A B) then
// cublasGemmEx (C = A B + C) with CUBLAS_GEMM_DEFAULT, or CUBLAS_GEMM_AUTOTUNE with --autotune;
// --atomics calls cublasSetAtomicsMode(CUBLAS_ATOMICS_ALLOWED) first.
// With --lt: a cuBLASLt matmul D = A B; the algo is the heuristic's first result (up to 4 asked
// for, within a 1 MiB workspace, none with --small-workspace). With --heuristic-noise the
// heuristic is asked for algos without out-of-place split-K reduction and the program keeps the
// fastest by event timing (like autotuning, so its choice can change from run to run); it
// prints "heuristic choice I of N".
// The final product is computed ITERATIONS times (default 1). A deep-k shape (m = n = 32,
// k = 1024) with values of mixed magnitude, so a different summation order changes the bits.
// Prints "checksum <hex>" of the result.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_checksum.h"

namespace {

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t status_ = (call);                                                    \
    if (status_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "gemm: %s: %s\n", #call, cudaGetErrorString(status_));          \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

#define CHECK_CUBLAS(call)                                                                 \
  do {                                                                                     \
    const cublasStatus_t status_ = (call);                                                 \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                \
      std::fprintf(stderr, "gemm: %s: cuBLAS status %d\n", #call, static_cast<int>(status_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kM = 32, kN = 32, kK = 1024;
constexpr size_t kWorkspaceBytes = 1 << 20;

struct Options {
  bool lt = false;
  bool atomics = false;
  bool autotune = false;
  bool heuristic_noise = false;
  bool small_workspace = false;
  int iterations = 1;
};

// Values of mixed magnitude (2^-8 .. 2^7), from a fixed LCG: float sums of them depend on
// their order.
std::vector<float> Values(size_t count, uint32_t seed) {
  std::vector<float> values(count);
  uint32_t state = seed;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    value = unit * static_cast<float>(1 << (state & 15)) / 256.0f;
  }
  return values;
}

void RunCublas(const Options& options, cudaStream_t stream, const float* a, const float* b,
               float* c) {
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasSetStream(handle, stream));
  CHECK_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  if (options.atomics) CHECK_CUBLAS(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_ALLOWED));
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < options.iterations; ++i) {
    CHECK_CUBLAS(
        cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kM, kN, kK, &one, a, kM, b, kK, &zero, c, kM));
    CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kM, kN, kK, &one, a, CUDA_R_32F,
                              kM, b, CUDA_R_32F, kK, &one, c, CUDA_R_32F, kM, CUBLAS_COMPUTE_32F,
                              options.autotune ? CUBLAS_GEMM_AUTOTUNE : CUBLAS_GEMM_DEFAULT));
  }
  CHECK_CUBLAS(cublasDestroy(handle));
}

void RunLt(const Options& options, cudaStream_t stream, const float* a, const float* b,
           float* d) {
  cublasLtHandle_t handle;
  CHECK_CUBLAS(cublasLtCreate(&handle));
  cublasLtMatmulDesc_t desc;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose,
                                              sizeof(no_transpose)));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose,
                                              sizeof(no_transpose)));
  cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_32F, kM, kK, kM));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_32F, kK, kN, kK));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d_layout, CUDA_R_32F, kM, kN, kM));

  const size_t workspace_bytes = options.small_workspace ? 0 : kWorkspaceBytes;
  void* workspace = nullptr;
  if (workspace_bytes > 0) CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
  cublasLtMatmulPreference_t preference;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t max_workspace = workspace_bytes;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  if (options.heuristic_noise) {
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_INPLACE;
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int returned = 0;
  CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle, desc, a_layout, b_layout, d_layout,
                                              d_layout, preference, 4, results, &returned));
  if (returned == 0) {
    std::fprintf(stderr, "gemm: the heuristic returned no algo\n");
    std::exit(1);
  }

  const float one = 1.0f, zero = 0.0f;
  auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    CHECK_CUBLAS(cublasLtMatmul(handle, desc, &one, a, a_layout, b, b_layout, &zero, d, d_layout,
                                d, d_layout, &algo, workspace, workspace_bytes, stream));
  };
  int chosen = 0;
  if (options.heuristic_noise) {
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    float best = 0;
    for (int i = 0; i < returned; ++i) {
      CHECK_CUDA(cudaEventRecord(start, stream));
      matmul(results[i].algo);
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      if (i == 0 || ms < best) {
        best = ms;
        chosen = i;
      }
    }
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
    std::printf("heuristic choice %d of %d\n", chosen, returned);
  }
  for (int i = 0; i < options.iterations; ++i) matmul(results[chosen].algo);

  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(preference));
  if (workspace != nullptr) CHECK_CUDA(cudaFree(workspace));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(a_layout));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(b_layout));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(d_layout));
  CHECK_CUBLAS(cublasLtMatmulDescDestroy(desc));
  CHECK_CUBLAS(cublasLtDestroy(handle));
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lt") == 0) {
      options.lt = true;
    } else if (std::strcmp(argv[i], "--atomics") == 0) {
      options.atomics = true;
    } else if (std::strcmp(argv[i], "--autotune") == 0) {
      options.autotune = true;
    } else if (std::strcmp(argv[i], "--heuristic-noise") == 0) {
      options.lt = options.heuristic_noise = true;
    } else if (std::strcmp(argv[i], "--small-workspace") == 0) {
      options.small_workspace = true;
    } else if (argv[i][0] != '-' && std::atoi(argv[i]) > 0) {
      options.iterations = std::atoi(argv[i]);
    } else {
      std::fprintf(stderr,
                   "usage: gemm [--lt] [--atomics] [--autotune] [--heuristic-noise] "
                   "[--small-workspace] [ITERATIONS]\n");
      return 2;
    }
  }

  const std::vector<float> host_a = Values(static_cast<size_t>(kM) * kK, 1);
  const std::vector<float> host_b = Values(static_cast<size_t>(kK) * kN, 2);
  std::vector<float> host_c(static_cast<size_t>(kM) * kN);
  float *a, *b, *c;
  CHECK_CUDA(cudaMalloc(&a, host_a.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&b, host_b.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&c, host_c.size() * sizeof(float)));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaMemcpyAsync(a, host_a.data(), host_a.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemcpyAsync(b, host_b.data(), host_b.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemsetAsync(c, 0, host_c.size() * sizeof(float), stream));

  if (options.lt) {
    RunLt(options, stream, a, b, c);
  } else {
    RunCublas(options, stream, a, b, c);
  }

  CHECK_CUDA(cudaMemcpyAsync(host_c.data(), c, host_c.size() * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(c));
  ndt::programs::PrintChecksum(host_c.data(), host_c.size() * sizeof(float));
  return 0;
}
