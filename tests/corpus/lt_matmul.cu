// lt_matmul: a two-layer MLP forward through cuBLASLt, as torch.nn.Linear reaches it
// (at::cuda::blas::gemm_and_bias): per layer a matmul descriptor with the layer's bias fused as
// an epilogue (CUBLASLT_EPILOGUE_RELU_BIAS for the hidden layer, as _addmm_activation fuses the
// ReLU; CUBLASLT_EPILOGUE_BIAS for the output layer), layouts, a preference with the workspace
// the caching allocator gave (PyTorch: one workspace per handle and stream), the heuristic's
// first algo, cublasLtMatmul on the compute stream. The second layer is deep in K (m = n = 32,
// k = 1024). The hidden layer's bias is computed on the device first (a column-sum kernel: a
// low-rank adapter folded into the bias). Deterministic: the preference asks for algos without
// out-of-place split-K (reduction scheme NONE or INPLACE), as a framework in deterministic mode
// does.
// --plant: no such mask; the heuristic's first algo for the deep layer then splits K four ways
// and reduces the partial sums in racing order. --plant-bias: the bias is summed with atomicAdd
// in racing order (CorpusColumnDotAtomic): the matmul reads another bias in every run, and must
// not be taken for the nondeterministic op. Results are checked against a double-precision
// host product within float tolerance.
#include <cublasLt.h>

#include <cmath>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

void CheckLt(cublasStatus_t status, const char* what, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s (line %d) failed: %d\n", what, line, static_cast<int>(status));
    std::exit(2);
  }
}
#define LT_CHECK(call) CheckLt((call), #call, __LINE__)

// D (m x n) = epilogue(A (m x k) B (k x n) + bias), column-major, through cuBLASLt; the bias
// (m floats) is added to every column, then ReLU when `relu`.
void Matmul(cublasLtHandle_t handle, bool plant, int m, int n, int k, const float* a,
            const float* b, const float* bias, bool relu, float* d, void* workspace,
            size_t workspace_bytes, cudaStream_t stream) {
  cublasLtMatmulDesc_t desc;
  LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                          sizeof(epilogue)));
  LT_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
  LT_CHECK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_32F, m, k, m));
  LT_CHECK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_32F, k, n, k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&d_layout, CUDA_R_32F, m, n, m));
  cublasLtMatmulPreference_t preference;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t max_workspace = workspace_bytes;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  if (!plant) {
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_INPLACE;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int returned = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, a_layout, b_layout, d_layout, d_layout,
                                          preference, 4, results, &returned));
  if (returned == 0) {
    std::fprintf(stderr, "lt_matmul: the heuristic returned no algo\n");
    std::exit(2);
  }
  const float one = 1.0f, zero = 0.0f;
  LT_CHECK(cublasLtMatmul(handle, desc, &one, a, a_layout, b, b_layout, &zero, d, d_layout, d,
                          d_layout, &results[0].algo, workspace, workspace_bytes, stream));
  LT_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  LT_CHECK(cublasLtMatrixLayoutDestroy(a_layout));
  LT_CHECK(cublasLtMatrixLayoutDestroy(b_layout));
  LT_CHECK(cublasLtMatrixLayoutDestroy(d_layout));
  LT_CHECK(cublasLtMatmulDescDestroy(desc));
}

std::vector<double> HostMatmul(int m, int n, int k, const std::vector<float>& a,
                               const std::vector<float>& b) {
  std::vector<double> d(static_cast<size_t>(m) * n, 0.0);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      for (int l = 0; l < k; ++l) d[i + j * m] += double(a[i + l * m]) * b[l + j * k];
    }
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const bool plant_bias = corpus::HasFlag(argc, argv, "--plant-bias");
  constexpr int kBatch = 32, kIn = 64, kHidden = 1024, kOut = 32, kRank = 16;
  corpus::CachingAllocator allocator;
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasLtHandle_t handle;
  LT_CHECK(cublasLtCreate(&handle));
  constexpr size_t kWorkspaceBytes = 256 * 1024;
  void* workspace = allocator.Allocate(kWorkspaceBytes, stream);

  // Layer 1: H (hidden x batch) = W1 (hidden x in) X (in x batch); layer 2: Y (out x batch) =
  // W2 (out x hidden) H, deep in K.
  const std::vector<float> x = corpus::MixedValues(size_t{kIn} * kBatch, 1);
  const std::vector<float> w1 = corpus::MixedValues(size_t{kHidden} * kIn, 2);
  const std::vector<float> w2 = corpus::MixedValues(size_t{kOut} * kHidden, 3);
  auto upload = [&](const std::vector<float>& host) {
    auto* device = static_cast<float*>(allocator.Allocate(host.size() * sizeof(float), stream));
    CORPUS_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float),
                                 cudaMemcpyHostToDevice, stream));
    return device;
  };
  // The biases: b1 = column sums of an adapter (kRank x kHidden, row-major) weighted by u,
  // on the device; b2 from the host.
  const std::vector<float> adapter = corpus::MixedValues(size_t{kRank} * kHidden, 4);
  const std::vector<float> u = corpus::MixedValues(kRank, 5);
  const std::vector<float> b2 = corpus::MixedValues(kOut, 6);
  float* d_x = upload(x);
  float* d_w1 = upload(w1);
  float* d_w2 = upload(w2);
  float* d_adapter = upload(adapter);
  float* d_u = upload(u);
  float* d_b2 = upload(b2);
  auto* d_b1 = static_cast<float*>(allocator.Allocate(size_t{kHidden} * 4, stream));
  if (plant_bias) {
    CORPUS_CHECK(cudaMemsetAsync(d_b1, 0, size_t{kHidden} * 4, stream));
    CorpusColumnDotAtomic<<<corpus::Blocks(kRank * kHidden), corpus::kThreads, 0, stream>>>(
        d_adapter, d_u, d_b1, kRank, kHidden);
  } else {
    CorpusColumnDot<<<corpus::Blocks(kHidden), corpus::kThreads, 0, stream>>>(d_adapter, d_u, d_b1,
                                                                              kRank, kHidden);
  }
  CORPUS_CHECK(cudaGetLastError());
  auto* d_h = static_cast<float*>(allocator.Allocate(size_t{kHidden} * kBatch * 4, stream));
  auto* d_y = static_cast<float*>(allocator.Allocate(size_t{kOut} * kBatch * 4, stream));
  Matmul(handle, plant, kHidden, kBatch, kIn, d_w1, d_x, d_b1, true, d_h, workspace,
         kWorkspaceBytes, stream);
  Matmul(handle, plant, kOut, kBatch, kHidden, d_w2, d_h, d_b2, false, d_y, workspace,
         kWorkspaceBytes, stream);
  std::vector<float> h(size_t{kHidden} * kBatch), y(size_t{kOut} * kBatch);
  CORPUS_CHECK(cudaMemcpyAsync(h.data(), d_h, h.size() * 4, cudaMemcpyDeviceToHost, stream));
  CORPUS_CHECK(cudaMemcpyAsync(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost, stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));

  // The host's check: H >= 0 (the ReLU), Y = W2 H + b2.
  for (const float value : h) {
    if (!(value >= 0)) {
      std::fprintf(stderr, "a hidden value %.9g after the ReLU epilogue\n", value);
      return 1;
    }
  }
  std::vector<double> y_exact = HostMatmul(kOut, kBatch, kHidden, w2, h);
  for (size_t i = 0; i < y_exact.size(); ++i) y_exact[i] += b2[i % kOut];
  for (size_t i = 0; i < y.size(); ++i) {
    if (std::fabs(y[i] - y_exact[i]) > 1e-3 * (1.0 + std::fabs(y_exact[i]))) {
      std::fprintf(stderr, "y[%zu] = %.9g, expected %.9g\n", i, y[i], y_exact[i]);
      return 1;
    }
  }
  ndt::programs::PrintChecksum(y.data(), y.size() * sizeof(float));
  LT_CHECK(cublasLtDestroy(handle));
  cudaStreamDestroy(stream);
  return 0;
}
