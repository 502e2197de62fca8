// train_e2e: the end-to-end benchmark's program (bench/bench_e2e.sh), a training loop shaped
// the way PyTorch drives CUDA, with thousands of small launches per step:
//  - a convolution stem (cuDNN legacy API: forward, backward data, backward filter) and `layers`
//    residual blocks, each a cuBLAS GEMM and a handful of elementwise kernels (CorpusAxpby: the
//    bias, activation, residual and normalisation kernels a framework launches one by one);
//  - forward on the main thread; loss.backward() handed to a long-lived "autograd" thread through
//    a queue while the main thread blocks, the backward on the same compute stream with the
//    autograd thread's own cuBLAS and cuDNN handles (PyTorch keeps one per thread);
//  - every tensor from a caching allocator (corpus_common.h), activations freed by the autograd
//    thread once the backward has used them, and handed out again the next step;
//  - each batch staged from pinned memory on a copy stream, an event the compute stream waits
//    for; the optimizer (momentum SGD, two kernels per parameter, not "foreach") and zero_grad
//    (cudaMemsetAsync per gradient) on the main thread; the loss read back every step
//    (cudaMemcpyAsync + cudaStreamSynchronize, as .item() does).
// Deterministic: the same `checksum` every run (the benchmark compares it across modes). Exits 1
// if a result is not finite.
//
//   train_e2e [--steps N] [--layers L]     (defaults: 10 steps, 128 layers)
//
// Per step: 14 L + 6 kernel launches, 3 L cuBLAS GEMMs, 3 cuDNN convolutions, 2 L + 1 memsets
// and 2 copies (L = 128: 1798 launches); the program prints the counts it issued on stderr.
#include <cublas_v2.h>
#include <cudnn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"
#include "corpus_kernels.cuh"

namespace {

// Values of mixed magnitude scaled by 2^-scale (exactly), so training stays finite.
std::vector<float> Scaled(size_t n, unsigned seed, int scale) {
  std::vector<float> v = corpus::MixedValues(n, seed);
  for (float& f : v) f = std::ldexp(f, -scale);
  return v;
}

// Hidden width and batch: activations are kHidden x kBatch, column-major (1024 floats), the same
// count as the stem's NCHW 4x4x8x8 images.
constexpr int kHidden = 64, kBatch = 16;
constexpr int kN = 4, kC = 4, kH = 8, kW = 8, kK = 4, kR = 3, kS = 3;
constexpr size_t kActivation = size_t{kHidden} * kBatch;
constexpr size_t kFilter = size_t{kK} * kC * kR * kS;
static_assert(kActivation == size_t{kN} * kC * kH * kW, "the stem's images are activations");
constexpr float kRate = 1e-3f, kMomentum = 0.9f;

// Counts of what the program issued, for the benchmark's per-launch figures.
struct Counts {
  long kernels = 0;  // <<<>>> launches
  long gemms = 0;
  long convolutions = 0;
  long memsets = 0;
  long copies = 0;
};

// A parameter with its gradient and momentum buffers.
struct Parameter {
  float* value;
  float* grad;
  float* momentum;
  size_t count;
};

void Launch(Counts* counts, cudaStream_t stream, float a, const float* x, float b, float* y,
            size_t n) {
  CorpusAxpby<<<corpus::Blocks(static_cast<int>(n)), corpus::kThreads, 0, stream>>>(
      a, x, b, y, static_cast<int>(n));
  ++counts->kernels;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10, layers = 128;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--layers") == 0) layers = std::atoi(argv[i + 1]);
  }
  if (steps < 1 || layers < 1) {
    std::fprintf(stderr, "usage: train_e2e [--steps N] [--layers L] (N, L >= 1)\n");
    return 2;
  }
  CORPUS_CHECK(cudaSetDevice(0));
  corpus::CachingAllocator allocator;
  cudaStream_t compute, copy;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  cudaEvent_t batch_ready, batch_used;
  CORPUS_CHECK(cudaEventCreateWithFlags(&batch_ready, cudaEventDisableTiming));
  CORPUS_CHECK(cudaEventCreateWithFlags(&batch_used, cudaEventDisableTiming));
  Counts fwd_counts, bwd_counts;  // the main thread's and the autograd thread's

  // The main thread's handles (forward); the autograd thread makes its own.
  cublasHandle_t blas;
  BLAS_CHECK(cublasCreate(&blas));
  BLAS_CHECK(cublasSetStream(blas, compute));
  cudnnHandle_t dnn;
  DNN_CHECK(cudnnCreate(&dnn));
  DNN_CHECK(cudnnSetStream(dnn, compute));
  cudnnTensorDescriptor_t image;
  cudnnFilterDescriptor_t filter;
  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateTensorDescriptor(&image));
  DNN_CHECK(cudnnCreateFilterDescriptor(&filter));
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  DNN_CHECK(cudnnSetTensor4dDescriptor(image, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kC, kH, kW));
  DNN_CHECK(cudnnSetFilter4dDescriptor(filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kK, kC, kR, kS));
  DNN_CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  // Deterministic algorithms (what torch.backends.cudnn.deterministic picks).
  const auto fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  const auto data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  const auto filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
  DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(dnn, image, filter, conv, image, fwd_algo,
                                                    &fwd_bytes));
  DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, filter, image, conv, image,
                                                         data_algo, &data_bytes));
  DNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, image, image, conv, filter,
                                                           filter_algo, &filter_bytes));
  const size_t workspace_bytes = std::max<size_t>({fwd_bytes, data_bytes, filter_bytes, 256});

  // Parameters: the stem's filter, then per layer a weight (kHidden x kHidden) and a gain.
  const auto tensor = [&](size_t count) {
    return static_cast<float*>(allocator.Allocate(count * sizeof(float), compute));
  };
  std::vector<Parameter> params;
  const auto add_param = [&](size_t count, unsigned seed, int scale) {
    Parameter p{tensor(count), tensor(count), tensor(count), count};
    const std::vector<float> init = Scaled(count, seed, scale);
    CORPUS_CHECK(cudaMemcpyAsync(p.value, init.data(), count * 4, cudaMemcpyHostToDevice,
                                 compute));
    CORPUS_CHECK(cudaMemsetAsync(p.grad, 0, count * 4, compute));
    CORPUS_CHECK(cudaMemsetAsync(p.momentum, 0, count * 4, compute));
    CORPUS_CHECK(cudaStreamSynchronize(compute));  // `init` is pageable and goes out of scope
    params.push_back(p);
  };
  add_param(kFilter, 7, 20);
  for (int l = 0; l < layers; ++l) {
    add_param(size_t{kHidden} * kHidden, 100 + 2 * l, 24);
    add_param(kActivation, 101 + 2 * l, 20);
  }
  const Parameter& stem = params[0];
  const auto weight = [&](int l) -> const Parameter& { return params[1 + 2 * l]; };
  const auto gain = [&](int l) -> const Parameter& { return params[2 + 2 * l]; };
  float* target = tensor(kActivation);
  {
    const std::vector<float> init = Scaled(kActivation, 5, 16);
    // On the compute stream, and waited for: a copy from pageable memory may return before its
    // bytes land, and the non-blocking stream would not wait for the legacy stream's copy.
    CORPUS_CHECK(cudaMemcpyAsync(target, init.data(), kActivation * 4, cudaMemcpyHostToDevice,
                                 compute));
    CORPUS_CHECK(cudaStreamSynchronize(compute));
  }
  float* loss = tensor(1);
  float* pinned = nullptr;  // the data loader's staging buffer
  CORPUS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), kActivation * 4,
                             cudaHostAllocDefault));

  // The autograd thread: backward jobs on the compute stream, one at a time, with its own
  // cuBLAS and cuDNN handles and cuDNN workspace.
  using BackwardJob = std::function<void(cublasHandle_t, cudnnHandle_t, void*)>;
  corpus::Queue<BackwardJob> backward_jobs;
  corpus::Queue<int> backward_done;
  std::thread autograd_thread([&] {
    CORPUS_CHECK(cudaSetDevice(0));
    cublasHandle_t bwd_blas;
    BLAS_CHECK(cublasCreate(&bwd_blas));
    BLAS_CHECK(cublasSetStream(bwd_blas, compute));
    cudnnHandle_t bwd_dnn;
    DNN_CHECK(cudnnCreate(&bwd_dnn));
    DNN_CHECK(cudnnSetStream(bwd_dnn, compute));
    void* workspace = allocator.Allocate(workspace_bytes, compute);
    for (;;) {
      BackwardJob job = backward_jobs.Pop();
      if (!job) break;
      job(bwd_blas, bwd_dnn, workspace);
      backward_done.Push(0);
    }
    allocator.Free(workspace);
    cudnnDestroy(bwd_dnn);
    cublasDestroy(bwd_blas);
  });

  const float one = 1.0f, zero = 0.0f;
  std::vector<float> losses(static_cast<size_t>(steps));
  void* fwd_workspace = allocator.Allocate(workspace_bytes, compute);
  for (int step = 0; step < steps; ++step) {
    // The loader: the previous batch must be consumed before the staging buffer is refilled.
    CORPUS_CHECK(cudaEventSynchronize(batch_used));
    const std::vector<float> batch = Scaled(kActivation, 1000 + step, 16);
    std::memcpy(pinned, batch.data(), kActivation * 4);
    float* x = static_cast<float*>(allocator.Allocate(kActivation * 4, copy));
    CORPUS_CHECK(cudaMemcpyAsync(x, pinned, kActivation * 4, cudaMemcpyHostToDevice, copy));
    ++fwd_counts.copies;
    CORPUS_CHECK(cudaEventRecord(batch_ready, copy));
    CORPUS_CHECK(cudaStreamWaitEvent(compute, batch_ready, 0));
    CORPUS_CHECK(cudaEventRecord(batch_used, compute));

    // Forward: h[0] = conv(x); per layer z = W h, h' = 0.5 z + 0.25 g + 0.25 h, normalised.
    std::vector<float*> h(static_cast<size_t>(layers) + 1), z(static_cast<size_t>(layers));
    h[0] = tensor(kActivation);
    DNN_CHECK(cudnnConvolutionForward(dnn, &one, image, x, filter, stem.value, conv, fwd_algo,
                                      fwd_workspace, workspace_bytes, &zero, image, h[0]));
    ++fwd_counts.convolutions;
    for (int l = 0; l < layers; ++l) {
      z[l] = tensor(kActivation);
      h[l + 1] = tensor(kActivation);
      BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kHidden, kBatch, kHidden, &one,
                             weight(l).value, kHidden, h[l], kHidden, &zero, z[l], kHidden));
      ++fwd_counts.gemms;
      Launch(&fwd_counts, compute, 0.5f, z[l], 0.0f, h[l + 1], kActivation);
      Launch(&fwd_counts, compute, 0.25f, gain(l).value, 1.0f, h[l + 1], kActivation);
      Launch(&fwd_counts, compute, 0.25f, h[l], 1.0f, h[l + 1], kActivation);
      Launch(&fwd_counts, compute, -0.125f, z[l], 1.0f, h[l + 1], kActivation);
      Launch(&fwd_counts, compute, 0.0f, z[l], 0.9375f, h[l + 1], kActivation);
    }
    // The loss: the sum of h[L] - target.
    float* residual = tensor(kActivation);
    Launch(&fwd_counts, compute, 1.0f, h[layers], 0.0f, residual, kActivation);
    Launch(&fwd_counts, compute, -1.0f, target, 1.0f, residual, kActivation);
    CorpusRowSum<<<1, corpus::kThreads, 0, compute>>>(residual, loss, 1,
                                                      static_cast<int>(kActivation));
    ++fwd_counts.kernels;
    CORPUS_CHECK(cudaGetLastError());

    // loss.backward(): the autograd thread does it; the main thread waits.
    backward_jobs.Push([&, x, residual](cublasHandle_t bwd_blas, cudnnHandle_t bwd_dnn,
                                        void* bwd_workspace) {
      float* dh = tensor(kActivation);  // d loss / d h[L] = 1 per element, as a residual
      Launch(&bwd_counts, compute, 1.0f, residual, 0.0f, dh, kActivation);
      for (int l = layers - 1; l >= 0; --l) {
        float* dz = tensor(kActivation);
        float* dh_prev = tensor(kActivation);
        Launch(&bwd_counts, compute, 0.375f, dh, 0.0f, dz, kActivation);
        Launch(&bwd_counts, compute, 0.25f, dh, 1.0f, gain(l).grad, kActivation);
        // dW += dz h^T; dh_prev = W^T dz + 0.25 dh.
        BLAS_CHECK(cublasSgemm(bwd_blas, CUBLAS_OP_N, CUBLAS_OP_T, kHidden, kHidden, kBatch,
                               &one, dz, kHidden, h[l], kHidden, &one, weight(l).grad, kHidden));
        BLAS_CHECK(cublasSgemm(bwd_blas, CUBLAS_OP_T, CUBLAS_OP_N, kHidden, kBatch, kHidden,
                               &one, weight(l).value, kHidden, dz, kHidden, &zero, dh_prev,
                               kHidden));
        bwd_counts.gemms += 2;
        Launch(&bwd_counts, compute, 0.25f, dh, 1.0f, dh_prev, kActivation);
        Launch(&bwd_counts, compute, 0.0f, dh, 0.9375f, dh_prev, kActivation);
        Launch(&bwd_counts, compute, 0.0f, dh, 1.0f, dh_prev, kActivation);
        // The saved activations are no longer needed: back to the allocator.
        allocator.Free(z[l]);
        allocator.Free(h[l + 1]);
        allocator.Free(dh);
        dh = dh_prev;
      }
      // The stem: the filter's gradient and (as autograd would for a non-leaf input) the data's.
      float* dx = tensor(kActivation);
      DNN_CHECK(cudnnConvolutionBackwardFilter(bwd_dnn, &one, image, x, image, dh, conv,
                                               filter_algo, bwd_workspace, workspace_bytes, &one,
                                               filter, stem.grad));
      DNN_CHECK(cudnnConvolutionBackwardData(bwd_dnn, &one, filter, stem.value, image, dh, conv,
                                             data_algo, bwd_workspace, workspace_bytes, &zero,
                                             image, dx));
      bwd_counts.convolutions += 2;
      CORPUS_CHECK(cudaGetLastError());
      allocator.Free(dx);
      allocator.Free(dh);
      allocator.Free(h[0]);
      allocator.Free(residual);
    });
    backward_done.Pop();

    // optimizer.step() (momentum SGD, one parameter at a time), then zero_grad().
    for (const Parameter& p : params) {
      Launch(&fwd_counts, compute, 1.0f, p.grad, kMomentum, p.momentum, p.count);
      Launch(&fwd_counts, compute, -kRate, p.momentum, 1.0f, p.value, p.count);
    }
    for (const Parameter& p : params) {
      CORPUS_CHECK(cudaMemsetAsync(p.grad, 0, p.count * 4, compute));
      ++fwd_counts.memsets;
    }
    CORPUS_CHECK(cudaGetLastError());
    // loss.item()
    CORPUS_CHECK(cudaMemcpyAsync(&losses[static_cast<size_t>(step)], loss, 4,
                                 cudaMemcpyDeviceToHost, compute));
    ++fwd_counts.copies;
    CORPUS_CHECK(cudaStreamSynchronize(compute));
    allocator.Free(x);
  }
  backward_jobs.Push(nullptr);
  autograd_thread.join();

  // The result: the losses, the stem's filter and the last layer's weight.
  std::vector<float> result = losses;
  std::vector<float> values(kFilter + size_t{kHidden} * kHidden);
  CORPUS_CHECK(cudaMemcpy(values.data(), stem.value, kFilter * 4, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(values.data() + kFilter, weight(layers - 1).value,
                          size_t{kHidden} * kHidden * 4, cudaMemcpyDeviceToHost));
  result.insert(result.end(), values.begin(), values.end());
  for (float v : result) {
    if (!std::isfinite(v)) {
      std::fprintf(stderr, "train_e2e: a result is not finite (%g)\n", v);
      return 1;
    }
  }
  std::printf("loss after %d steps of %d layers: %.9g\n", steps, layers, losses.back());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  const long kernels = fwd_counts.kernels + bwd_counts.kernels;
  const long gemms = fwd_counts.gemms + bwd_counts.gemms;
  const long convolutions = fwd_counts.convolutions + bwd_counts.convolutions;
  std::fprintf(stderr,
               "train_e2e: %ld kernel launches, %ld cuBLAS GEMMs, %ld cuDNN convolutions, %ld "
               "memsets, %ld copies in the loop\n",
               kernels, gemms, convolutions, fwd_counts.memsets, fwd_counts.copies);
  allocator.Free(fwd_workspace);
  CORPUS_CHECK(cudaFreeHost(pinned));
  cublasDestroy(blas);
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroyFilterDescriptor(filter);
  cudnnDestroyTensorDescriptor(image);
  cudnnDestroy(dnn);
  cudaEventDestroy(batch_used);
  cudaEventDestroy(batch_ready);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(copy);
  return 0;
}
