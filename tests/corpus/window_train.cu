// window_train: a two-layer network (convolution, then a fully connected layer) trained step by
// step the way a PyTorch loop drives CUDA: a pinned staging buffer and a copy stream bring each
// batch in (cudaMemcpyAsync, then an event the compute stream waits for), the forward and
// backward passes run on a compute stream through cuDNN's legacy API and cuBLAS, gradients are
// zeroed with cudaMemsetAsync, the SGD update is a kernel, and the loss is read back every step
// (cudaMemcpyAsync to the host + cudaStreamSynchronize). Each tensor has its own cudaMalloc (as
// PyTorch with PYTORCH_NO_CUDA_MEMORY_CACHING=1). Window replay's test program
// (tests/tracer/window_replay_test.cc) and benchmark (bench/bench_window.sh).
//
//   window_train [--plant] [--steps N]
//
// --plant: the convolution's backward filter runs CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, which
// cuDNN documents as nondeterministic (atomics); by default ALGO_1 (deterministic).
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"
#include "corpus_kernels.cuh"

namespace {

// Values of mixed magnitude in (-0.5, 0.5), so that the order of float additions shows in the
// bits while training stays finite.
std::vector<float> Values(size_t count, unsigned seed) {
  std::vector<float> values = corpus::MixedValues(count, seed);
  for (float& value : values) value *= 1.0f / 262144.0f;
  return values;
}

float* DeviceTensor(size_t count) {
  void* device = nullptr;
  CORPUS_CHECK(cudaMalloc(&device, count * sizeof(float)));
  return static_cast<float*>(device);
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  int steps = 4;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  if (steps < 1) steps = 1;
  // Batch 4 of 3x16x16 images, 8 filters of 3x3 (padding 1), a 4-way fully connected layer.
  constexpr int kN = 4, kC = 3, kH = 16, kW = 16, kK = 8, kR = 3, kS = 3, kOut = 4;
  constexpr int kFeatures = kK * kH * kW;
  constexpr size_t x_count = size_t{kN} * kC * kH * kW, w_count = size_t{kK} * kC * kR * kS,
                   y_count = size_t{kN} * kFeatures, fc_count = size_t{kOut} * kFeatures,
                   z_count = size_t{kOut} * kN;

  cudaStream_t copy_stream, compute;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t batch_ready, batch_used;
  CORPUS_CHECK(cudaEventCreateWithFlags(&batch_ready, cudaEventDisableTiming));
  CORPUS_CHECK(cudaEventCreateWithFlags(&batch_used, cudaEventDisableTiming));
  cudnnHandle_t dnn;
  DNN_CHECK(cudnnCreate(&dnn));
  DNN_CHECK(cudnnSetStream(dnn, compute));
  cublasHandle_t blas;
  BLAS_CHECK(cublasCreate(&blas));
  BLAS_CHECK(cublasSetStream(blas, compute));

  cudnnTensorDescriptor_t x_desc, y_desc;
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateTensorDescriptor(&x_desc));
  DNN_CHECK(cudnnCreateTensorDescriptor(&y_desc));
  DNN_CHECK(cudnnCreateFilterDescriptor(&w_desc));
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  DNN_CHECK(
      cudnnSetTensor4dDescriptor(x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kC, kH, kW));
  DNN_CHECK(
      cudnnSetFilter4dDescriptor(w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kK, kC, kR, kS));
  DNN_CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  DNN_CHECK(
      cudnnSetTensor4dDescriptor(y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kK, kH, kW));
  const auto fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  const auto filter_algo =
      plant ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t fwd_bytes = 0, filter_bytes = 0;
  DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(dnn, x_desc, w_desc, conv, y_desc, fwd_algo,
                                                    &fwd_bytes));
  DNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, x_desc, y_desc, conv, w_desc,
                                                           filter_algo, &filter_bytes));
  const size_t workspace_bytes = std::max<size_t>(std::max(fwd_bytes, filter_bytes), 256);
  void* workspace = nullptr;
  CORPUS_CHECK(cudaMalloc(&workspace, workspace_bytes));

  // Parameters, activations and gradients.
  float *d_x = DeviceTensor(x_count), *d_w = DeviceTensor(w_count), *d_y = DeviceTensor(y_count),
        *d_fc = DeviceTensor(fc_count), *d_z = DeviceTensor(z_count), *d_dz = DeviceTensor(z_count),
        *d_dy = DeviceTensor(y_count), *d_dw = DeviceTensor(w_count),
        *d_dfc = DeviceTensor(fc_count), *d_target = DeviceTensor(z_count);
  const std::vector<float> w0 = Values(w_count, 21);
  const std::vector<float> fc0 = Values(fc_count, 22);
  const std::vector<float> target = Values(z_count, 23);
  CORPUS_CHECK(cudaMemcpy(d_w, w0.data(), w_count * 4, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(d_fc, fc0.data(), fc_count * 4, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(d_target, target.data(), z_count * 4, cudaMemcpyHostToDevice));
  // A copy from pageable memory may return before its bytes land, and the non-blocking streams
  // do not wait for the legacy stream's work: wait for them here.
  CORPUS_CHECK(cudaDeviceSynchronize());

  float* pinned = nullptr;  // the data loader's staging buffer
  CORPUS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), x_count * 4, cudaHostAllocDefault));
  // Per step: the loss gradient and the weight gradient, as a training log would keep them.
  const size_t logged = z_count + w_count;
  std::vector<float> losses(logged * static_cast<size_t>(steps));
  const float one = 1.0f, zero = 0.0f, rate = 1e-8f;
  for (int step = 0; step < steps; ++step) {
    // The loader: the previous batch must be consumed before the staging buffer is refilled.
    CORPUS_CHECK(cudaEventSynchronize(batch_used));
    const std::vector<float> batch = Values(x_count, 100 + step);
    std::memcpy(pinned, batch.data(), x_count * 4);
    CORPUS_CHECK(cudaMemcpyAsync(d_x, pinned, x_count * 4, cudaMemcpyHostToDevice, copy_stream));
    CORPUS_CHECK(cudaEventRecord(batch_ready, copy_stream));
    CORPUS_CHECK(cudaStreamWaitEvent(compute, batch_ready, 0));
    CORPUS_CHECK(cudaEventRecord(batch_used, compute));

    // Forward: y = conv(x, w); z = fc * y (column-major: z is kOut x kN).
    DNN_CHECK(cudnnConvolutionForward(dnn, &one, x_desc, d_x, w_desc, d_w, conv, fwd_algo,
                                      workspace, workspace_bytes, &zero, y_desc, d_y));
    BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kOut, kN, kFeatures, &one, d_fc, kOut,
                           d_y, kFeatures, &zero, d_z, kOut));
    // Loss gradient dz = z - target; gradients zeroed as optimizer.zero_grad() does.
    CORPUS_CHECK(cudaMemsetAsync(d_dz, 0, z_count * 4, compute));
    CorpusAxpby<<<corpus::Blocks(static_cast<int>(z_count)), corpus::kThreads, 0, compute>>>(
        1.0f, d_z, 0.0f, d_dz, static_cast<int>(z_count));
    CorpusAxpby<<<corpus::Blocks(static_cast<int>(z_count)), corpus::kThreads, 0, compute>>>(
        -1.0f, d_target, 1.0f, d_dz, static_cast<int>(z_count));
    CORPUS_CHECK(cudaGetLastError());
    // Backward: dfc = dz * y^T, dy = fc^T * dz, dw = conv_bwd_filter(x, dy).
    BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, kOut, kFeatures, kN, &one, d_dz, kOut,
                           d_y, kFeatures, &zero, d_dfc, kOut));
    BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, kFeatures, kN, kOut, &one, d_fc, kOut,
                           d_dz, kOut, &zero, d_dy, kFeatures));
    DNN_CHECK(cudnnConvolutionBackwardFilter(dnn, &one, x_desc, d_x, y_desc, d_dy, conv,
                                             filter_algo, workspace, workspace_bytes, &zero, w_desc,
                                             d_dw));
    // SGD: w -= rate * dw, fc -= rate * dfc.
    CorpusAxpby<<<corpus::Blocks(static_cast<int>(w_count)), corpus::kThreads, 0, compute>>>(
        -rate, d_dw, 1.0f, d_w, static_cast<int>(w_count));
    CorpusAxpby<<<corpus::Blocks(static_cast<int>(fc_count)), corpus::kThreads, 0, compute>>>(
        -rate, d_dfc, 1.0f, d_fc, static_cast<int>(fc_count));
    CORPUS_CHECK(cudaGetLastError());
    // The loss and the gradient norm's input, read back every step.
    CORPUS_CHECK(cudaMemcpyAsync(losses.data() + logged * step, d_dz, z_count * 4,
                                 cudaMemcpyDeviceToHost, compute));
    CORPUS_CHECK(cudaMemcpyAsync(losses.data() + logged * step + z_count, d_dw, w_count * 4,
                                 cudaMemcpyDeviceToHost, compute));
    CORPUS_CHECK(cudaStreamSynchronize(compute));
  }
  std::vector<float> w(w_count);
  CORPUS_CHECK(cudaMemcpy(w.data(), d_w, w_count * 4, cudaMemcpyDeviceToHost));
  losses.insert(losses.end(), w.begin(), w.end());
  std::printf("backward filter algo %d, %d steps\n", static_cast<int>(filter_algo), steps);
  ndt::programs::PrintChecksum(losses.data(), losses.size() * sizeof(float));
  for (float* p : {d_x, d_w, d_y, d_fc, d_z, d_dz, d_dy, d_dw, d_dfc, d_target}) cudaFree(p);
  cudaFree(workspace);
  cudaFreeHost(pinned);
  cublasDestroy(blas);
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroyFilterDescriptor(w_desc);
  cudnnDestroyTensorDescriptor(y_desc);
  cudnnDestroyTensorDescriptor(x_desc);
  cudnnDestroy(dnn);
  cudaEventDestroy(batch_used);
  cudaEventDestroy(batch_ready);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(copy_stream);
  return 0;
}
