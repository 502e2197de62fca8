// amp_offload: mixed-precision training with the optimizer on the CPU, as torch.autocast with an
// offloaded optimizer (ZeRO-Offload, FSDP's CPU offload) drives cuBLAS: the master weights stay in
// float on the host; each step they are rounded to half and bfloat16 on the host and uploaded
// from pinned memory; the forward runs in 16-bit on the GPU (cublasGemmEx with CUDA_R_16F and
// CUDA_R_16BF data, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP, as PyTorch's half and
// bfloat16 matmuls call it), attention-like scores per head with cublasGemmStridedBatchedEx; the
// weight gradients are accumulated in float over two micro-batches (16-bit inputs, a float
// output with beta = 1) by a long-lived backward thread with a cuBLAS handle of its own on the
// same stream (PyTorch's autograd device thread: handles are per thread), while the main thread
// waits for it, as loss.backward() does; the gradients are read back and the SGD step is taken
// on the host. A loader thread uploads each step's micro-batches on a copy stream while the
// weights are uploaded on the compute stream (an event orders them).
// --plant: atomics allowed on the backward thread's handle, so the gradient GEMMs (float output)
// may add split-K partial sums in racing order: cublasGemmEx is nondeterministic.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"

namespace {

constexpr int kBatch = 32, kIn = 64, kOut = 48, kHeads = 4, kSteps = 4, kMicro = 2;
constexpr float kLearningRate = 0.01f;

// A deterministic value in [-1, 1) from a 64-bit LCG.
float Uniform(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<double>(*state >> 11) / static_cast<double>(1ull << 52) -
                            1.0);
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  CORPUS_CHECK(cudaSetDevice(0));
  cudaStream_t compute, copy;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, compute));
  BLAS_CHECK(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH));

  // Master weights (float, host): W (kIn x kOut, column-major), one for each head dtype.
  uint64_t state = 7;
  std::vector<float> master_h(size_t{kIn} * kOut), master_b(size_t{kIn} * kOut);
  for (float& w : master_h) w = 0.1f * Uniform(&state);
  for (float& w : master_b) w = 0.1f * Uniform(&state);

  // Pinned staging: inputs of every micro-batch in both 16-bit types, the weights, the grads.
  const size_t x_count = size_t{kBatch} * kIn, w_count = size_t{kIn} * kOut;
  __half *x_h_host, *w_h_host;
  __nv_bfloat16 *x_b_host, *w_b_host;
  float* grads_host;
  CORPUS_CHECK(cudaMallocHost(&x_h_host, kMicro * x_count * sizeof(__half)));
  CORPUS_CHECK(cudaMallocHost(&x_b_host, kMicro * x_count * sizeof(__nv_bfloat16)));
  CORPUS_CHECK(cudaMallocHost(&w_h_host, w_count * sizeof(__half)));
  CORPUS_CHECK(cudaMallocHost(&w_b_host, w_count * sizeof(__nv_bfloat16)));
  CORPUS_CHECK(cudaMallocHost(&grads_host, 2 * w_count * sizeof(float)));
  __half *x_h, *w_h, *y_h, *dy_h;
  __nv_bfloat16 *x_b, *w_b, *y_b, *dy_b;
  float *grads, *scores;
  CORPUS_CHECK(cudaMalloc(&x_h, kMicro * x_count * sizeof(__half)));
  CORPUS_CHECK(cudaMalloc(&x_b, kMicro * x_count * sizeof(__nv_bfloat16)));
  CORPUS_CHECK(cudaMalloc(&w_h, w_count * sizeof(__half)));
  CORPUS_CHECK(cudaMalloc(&w_b, w_count * sizeof(__nv_bfloat16)));
  CORPUS_CHECK(cudaMalloc(&y_h, size_t{kBatch} * kOut * sizeof(__half)));
  CORPUS_CHECK(cudaMalloc(&y_b, size_t{kBatch} * kOut * sizeof(__nv_bfloat16)));
  CORPUS_CHECK(cudaMalloc(&dy_h, size_t{kBatch} * kOut * sizeof(__half)));
  CORPUS_CHECK(cudaMalloc(&dy_b, size_t{kBatch} * kOut * sizeof(__nv_bfloat16)));
  CORPUS_CHECK(cudaMalloc(&grads, 2 * w_count * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&scores, size_t{kHeads} * kBatch * kBatch * sizeof(float)));
  cudaEvent_t uploaded;
  CORPUS_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));

  const float one = 1.0f, zero = 0.0f;
  // The backward thread: for micro-batch `micro` (-1: stop), the loss is 1/2 |Y|^2, so
  // dL/dY = Y: the weight gradient X^T Y, accumulated in float.
  corpus::Queue<int> backward_work, backward_done;
  std::thread autograd([&] {
    cublasHandle_t own;
    BLAS_CHECK(cublasCreate(&own));
    BLAS_CHECK(cublasSetStream(own, compute));
    if (plant) BLAS_CHECK(cublasSetAtomicsMode(own, CUBLAS_ATOMICS_ALLOWED));
    for (int micro; (micro = backward_work.Pop()) >= 0;) {
      const __half* xh = x_h + micro * x_count;
      const __nv_bfloat16* xb = x_b + micro * x_count;
      CORPUS_CHECK(cudaMemcpyAsync(dy_h, y_h, size_t{kBatch} * kOut * sizeof(__half),
                                   cudaMemcpyDeviceToDevice, compute));
      CORPUS_CHECK(cudaMemcpyAsync(dy_b, y_b, size_t{kBatch} * kOut * sizeof(__nv_bfloat16),
                                   cudaMemcpyDeviceToDevice, compute));
      BLAS_CHECK(cublasGemmEx(own, CUBLAS_OP_T, CUBLAS_OP_N, kIn, kOut, kBatch, &one, xh,
                              CUDA_R_16F, kBatch, dy_h, CUDA_R_16F, kBatch, &one, grads,
                              CUDA_R_32F, kIn, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
      BLAS_CHECK(cublasGemmEx(own, CUBLAS_OP_T, CUBLAS_OP_N, kIn, kOut, kBatch, &one, xb,
                              CUDA_R_16BF, kBatch, dy_b, CUDA_R_16BF, kBatch, &one,
                              grads + w_count, CUDA_R_32F, kIn, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT_TENSOR_OP));
      backward_done.Push(micro);
    }
    BLAS_CHECK(cublasDestroy(own));
  });
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    // The loader thread: this step's micro-batches, rounded on the host, uploaded on the copy
    // stream.
    std::thread loader([&] {
      uint64_t batch_state = 1000 + step;
      for (size_t i = 0; i < kMicro * x_count; ++i) {
        const float x = Uniform(&batch_state);
        x_h_host[i] = __float2half(x);
        x_b_host[i] = __float2bfloat16(x);
      }
      CORPUS_CHECK(cudaMemcpyAsync(x_h, x_h_host, kMicro * x_count * sizeof(__half),
                                   cudaMemcpyHostToDevice, copy));
      CORPUS_CHECK(cudaMemcpyAsync(x_b, x_b_host, kMicro * x_count * sizeof(__nv_bfloat16),
                                   cudaMemcpyHostToDevice, copy));
      CORPUS_CHECK(cudaEventRecord(uploaded, copy));
    });
    // Meanwhile: the master weights rounded to 16 bits and uploaded on the compute stream.
    for (size_t i = 0; i < w_count; ++i) {
      w_h_host[i] = __float2half(master_h[i]);
      w_b_host[i] = __float2bfloat16(master_b[i]);
    }
    CORPUS_CHECK(cudaMemcpyAsync(w_h, w_h_host, w_count * sizeof(__half), cudaMemcpyHostToDevice,
                                 compute));
    CORPUS_CHECK(cudaMemcpyAsync(w_b, w_b_host, w_count * sizeof(__nv_bfloat16),
                                 cudaMemcpyHostToDevice, compute));
    CORPUS_CHECK(cudaMemsetAsync(grads, 0, 2 * w_count * sizeof(float), compute));
    loader.join();
    CORPUS_CHECK(cudaStreamWaitEvent(compute, uploaded, 0));

    for (int micro = 0; micro < kMicro; ++micro) {
      const __half* xh = x_h + micro * x_count;
      const __nv_bfloat16* xb = x_b + micro * x_count;
      // Forward: Y = X W (X: kBatch x kIn, column-major) in each 16-bit type.
      BLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kBatch, kOut, kIn, &one, xh,
                              CUDA_R_16F, kBatch, w_h, CUDA_R_16F, kIn, &zero, y_h, CUDA_R_16F,
                              kBatch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
      BLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kBatch, kOut, kIn, &one, xb,
                              CUDA_R_16BF, kBatch, w_b, CUDA_R_16BF, kIn, &zero, y_b,
                              CUDA_R_16BF, kBatch, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT_TENSOR_OP));
      // Attention-like scores per head: S_h = X_h X_h^T over kIn / kHeads features each.
      BLAS_CHECK(cublasGemmStridedBatchedEx(
          handle, CUBLAS_OP_N, CUBLAS_OP_T, kBatch, kBatch, kIn / kHeads, &one, xh, CUDA_R_16F,
          kBatch, kBatch * (kIn / kHeads), xh, CUDA_R_16F, kBatch, kBatch * (kIn / kHeads), &zero,
          scores, CUDA_R_32F, kBatch, kBatch * kBatch, kHeads, CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT_TENSOR_OP));
      backward_work.Push(micro);  // loss.backward(): the autograd thread runs it
      backward_done.Pop();
    }
    // The optimizer on the host: gradients read back, SGD on the master weights.
    CORPUS_CHECK(cudaMemcpyAsync(grads_host, grads, 2 * w_count * sizeof(float),
                                 cudaMemcpyDeviceToHost, compute));
    CORPUS_CHECK(cudaStreamSynchronize(compute));
    double norm = 0;
    for (size_t i = 0; i < w_count; ++i) {
      master_h[i] -= kLearningRate / (kMicro * kBatch) * grads_host[i];
      master_b[i] -= kLearningRate / (kMicro * kBatch) * grads_host[w_count + i];
      norm += double(grads_host[i]) * grads_host[i] + double(grads_host[w_count + i]) *
                                                          grads_host[w_count + i];
    }
    if (!std::isfinite(norm) || norm <= 0) {
      std::fprintf(stderr, "step %d: gradient norm %g\n", step, norm);
      return 1;
    }
    losses.push_back(static_cast<float>(norm));
  }
  backward_work.Push(-1);
  autograd.join();

  // The host's check of the last forward's heads against a float product of the same rounded
  // inputs (half output: 11 bits of mantissa, bfloat16: 8).
  std::vector<__half> y16(size_t{kBatch} * kOut);
  std::vector<__nv_bfloat16> ybf(size_t{kBatch} * kOut);
  CORPUS_CHECK(cudaMemcpyAsync(y16.data(), y_h, y16.size() * sizeof(__half),
                               cudaMemcpyDeviceToHost, compute));
  CORPUS_CHECK(cudaMemcpyAsync(ybf.data(), y_b, ybf.size() * sizeof(__nv_bfloat16),
                               cudaMemcpyDeviceToHost, compute));
  std::vector<float> s(size_t{kHeads} * kBatch * kBatch);
  CORPUS_CHECK(cudaMemcpyAsync(s.data(), scores, s.size() * sizeof(float), cudaMemcpyDeviceToHost,
                               compute));
  CORPUS_CHECK(cudaStreamSynchronize(compute));
  const size_t last = (kMicro - 1) * x_count;
  for (int j = 0; j < kOut; j += 5) {
    for (int i = 0; i < kBatch; i += 3) {
      double exact16 = 0, exactbf = 0;
      for (int l = 0; l < kIn; ++l) {
        const size_t x = last + i + static_cast<size_t>(l) * kBatch;
        const size_t w = l + static_cast<size_t>(j) * kIn;
        exact16 += double(__half2float(x_h_host[x])) * __half2float(w_h_host[w]);
        exactbf += double(__bfloat162float(x_b_host[x])) * __bfloat162float(w_b_host[w]);
      }
      const size_t y = i + static_cast<size_t>(j) * kBatch;
      const float got16 = __half2float(y16[y]), gotbf = __bfloat162float(ybf[y]);
      if (std::fabs(got16 - exact16) > 2e-3 * (1 + std::fabs(exact16)) ||
          std::fabs(gotbf - exactbf) > 1e-2 * (1 + std::fabs(exactbf))) {
        std::fprintf(stderr, "Y[%d,%d] = %g (half), %g (bfloat16); expected %g, %g\n", i, j,
                     got16, gotbf, exact16, exactbf);
        return 1;
      }
    }
  }
  std::vector<float> all(losses);
  all.insert(all.end(), master_h.begin(), master_h.end());
  all.insert(all.end(), master_b.begin(), master_b.end());
  all.insert(all.end(), s.begin(), s.end());
  ndt::programs::PrintChecksum(all.data(), all.size() * sizeof(float));
  for (void* device : {static_cast<void*>(x_h), static_cast<void*>(x_b), static_cast<void*>(w_h),
                       static_cast<void*>(w_b), static_cast<void*>(y_h), static_cast<void*>(y_b),
                       static_cast<void*>(dy_h), static_cast<void*>(dy_b),
                       static_cast<void*>(grads), static_cast<void*>(scores)}) {
    CORPUS_CHECK(cudaFree(device));
  }
  for (void* host :
       {static_cast<void*>(x_h_host), static_cast<void*>(x_b_host), static_cast<void*>(w_h_host),
        static_cast<void*>(w_b_host), static_cast<void*>(grads_host)}) {
    CORPUS_CHECK(cudaFreeHost(host));
  }
  CORPUS_CHECK(cudaEventDestroy(uploaded));
  BLAS_CHECK(cublasDestroy(handle));
  CORPUS_CHECK(cudaStreamDestroy(copy));
  CORPUS_CHECK(cudaStreamDestroy(compute));
  return 0;
}
