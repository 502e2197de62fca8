// cudnn_cnn: a small image classifier trained on cuDNN's legacy API and cuBLAS, as C++ code
// written after NVIDIA's cuDNN samples does it (no kernel of its own): convolution (3x3, pad 1),
// a per-channel bias (cudnnAddTensor), batch normalization as PyTorch's BatchNorm2d calls it
// (cudnnBatchNormalizationForwardTrainingEx, running averages kept), ReLU
// (cudnnActivationForward), 3x3 max pooling with stride 1 and padding 1 (the size-preserving
// pooling of Inception's branches and of YOLO's spatial pyramid: every input is in nine windows),
// a fully connected layer (cublasSgemm), softmax (cudnnSoftmaxForward); the loss gradient
// p - onehot by cublasSgeam, then cublasSgemm for the layer's gradients, cudnnPoolingBackward,
// cudnnActivationBackward, cudnnBatchNormalizationBackwardEx, cudnnConvolutionBackwardFilter,
// and SGD steps by cublasSaxpy (the batch norm's scale and shift too). A loader thread fills pinned
// batches and uploads them on a copy stream of its own, recording an event the training stream
// waits for (a data loader's shape). The pooling mode is CUDNN_POOLING_MAX_DETERMINISTIC.
// --plant: CUDNN_POOLING_MAX, which tutorials use and the cuDNN documentation lists as not
// reproducible in cudnnPoolingBackward (the gradients of overlapping windows meet with atomics).
#include <cublas_v2.h>
#include <cudnn.h>

#include <cmath>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"

namespace {

constexpr int kN = 8, kH = 12, kW = 12, kK = 4, kClasses = 10, kSteps = 4;
constexpr int kPooled = 12;  // 1 + (12 + 2 - 3) / 1
constexpr int kFeatures = kK * kPooled * kPooled;
constexpr float kRate = 0.01f;

// One batch: images and their one-hot labels, as a loader prepares them.
struct Batch {
  float* images = nullptr;  // pinned, kN x 1 x kH x kW
  float* onehot = nullptr;  // pinned, kClasses x kN (column per sample)
  float* d_images = nullptr;
  float* d_onehot = nullptr;
  cudaEvent_t ready = nullptr;
};

// The loader: batch `step` from a fixed generator, uploaded on the copy stream.
void Load(int step, cudaStream_t copy, Batch* batch) {
  uint32_t state = 1234u + 77u * static_cast<uint32_t>(step);
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (int i = 0; i < kN * kH * kW; ++i) {
    batch->images[i] = static_cast<float>(next() % 2001) / 1000.0f - 1.0f;
  }
  for (int i = 0; i < kN * kClasses; ++i) batch->onehot[i] = 0.0f;
  for (int n = 0; n < kN; ++n) batch->onehot[n * kClasses + next() % kClasses] = 1.0f;
  CORPUS_CHECK(cudaMemcpyAsync(batch->d_images, batch->images, kN * kH * kW * sizeof(float),
                               cudaMemcpyHostToDevice, copy));
  CORPUS_CHECK(cudaMemcpyAsync(batch->d_onehot, batch->onehot, kN * kClasses * sizeof(float),
                               cudaMemcpyHostToDevice, copy));
  CORPUS_CHECK(cudaEventRecord(batch->ready, copy));
}

cudnnTensorDescriptor_t Tensor(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t desc;
  DNN_CHECK(cudnnCreateTensorDescriptor(&desc));
  DNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return desc;
}

float* DeviceFloats(size_t count) {
  float* p;
  CORPUS_CHECK(cudaMalloc(&p, count * sizeof(float)));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  CORPUS_CHECK(cudaSetDevice(0));
  cudaStream_t stream, copy;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  cudnnHandle_t dnn;
  DNN_CHECK(cudnnCreate(&dnn));
  DNN_CHECK(cudnnSetStream(dnn, stream));
  cublasHandle_t blas;
  BLAS_CHECK(cublasCreate(&blas));
  BLAS_CHECK(cublasSetStream(blas, stream));

  // Descriptors: input, convolution output, pooled output, logits (N x classes x 1 x 1), bias.
  const cudnnTensorDescriptor_t x_desc = Tensor(kN, 1, kH, kW);
  const cudnnTensorDescriptor_t conv_desc = Tensor(kN, kK, kH, kW);
  const cudnnTensorDescriptor_t pool_desc = Tensor(kN, kK, kPooled, kPooled);
  const cudnnTensorDescriptor_t logits_desc = Tensor(kN, kClasses, 1, 1);
  const cudnnTensorDescriptor_t bias_desc = Tensor(1, kK, 1, 1);
  cudnnFilterDescriptor_t w_desc;
  DNN_CHECK(cudnnCreateFilterDescriptor(&w_desc));
  DNN_CHECK(cudnnSetFilter4dDescriptor(w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kK, 1, 3, 3));
  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  DNN_CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  cudnnActivationDescriptor_t relu;
  DNN_CHECK(cudnnCreateActivationDescriptor(&relu));
  DNN_CHECK(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
  cudnnPoolingDescriptor_t pooling;
  DNN_CHECK(cudnnCreatePoolingDescriptor(&pooling));
  DNN_CHECK(cudnnSetPooling2dDescriptor(pooling,
                                        plant ? CUDNN_POOLING_MAX : CUDNN_POOLING_MAX_DETERMINISTIC,
                                        CUDNN_NOT_PROPAGATE_NAN, 3, 3, 1, 1, 1, 1));
  int n, c, h, w;
  DNN_CHECK(cudnnGetPooling2dForwardOutputDim(pooling, conv_desc, &n, &c, &h, &w));
  if (n != kN || c != kK || h != kPooled || w != kPooled) {
    std::fprintf(stderr, "cudnn_cnn: pooled shape %dx%dx%dx%d\n", n, c, h, w);
    return 2;
  }
  const auto fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  const auto filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;  // deterministic
  size_t fwd_bytes = 0, filter_bytes = 0;
  DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(dnn, x_desc, w_desc, conv, conv_desc, fwd_algo,
                                                    &fwd_bytes));
  DNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, x_desc, conv_desc, conv, w_desc,
                                                           filter_algo, &filter_bytes));
  void* workspace = nullptr;
  const size_t workspace_bytes = std::max(fwd_bytes, filter_bytes);
  if (workspace_bytes > 0) CORPUS_CHECK(cudaMalloc(&workspace, workspace_bytes));

  // Parameters from a fixed generator.
  const std::vector<float> w_conv = corpus::SmallMixedValues(kK * 9, 11);
  const std::vector<float> bias = {0.01f, -0.02f, 0.03f, 0.0f};
  std::vector<float> w_fc = corpus::SmallMixedValues(kClasses * kFeatures, 12);
  for (float& v : w_fc) v *= 0.03125f;  // exact: logits of a sensible size
  float* d_w_conv = DeviceFloats(w_conv.size());
  float* d_bias = DeviceFloats(bias.size());
  float* d_w_fc = DeviceFloats(w_fc.size());
  CORPUS_CHECK(
      cudaMemcpy(d_w_conv, w_conv.data(), w_conv.size() * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(
      cudaMemcpy(d_bias, bias.data(), bias.size() * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(
      cudaMemcpy(d_w_fc, w_fc.data(), w_fc.size() * sizeof(float), cudaMemcpyHostToDevice));
  // Copies from pageable memory return once staged; the training stream does not wait for the
  // legacy stream they ran on.
  CORPUS_CHECK(cudaDeviceSynchronize());
  // Activations and gradients.
  float* d_conv = DeviceFloats(kN * kK * kH * kW);
  float* d_bn = DeviceFloats(kN * kK * kH * kW);
  float* d_relu = DeviceFloats(kN * kK * kH * kW);
  float* d_pool = DeviceFloats(kN * kFeatures);
  float* d_logits = DeviceFloats(kN * kClasses);
  float* d_probs = DeviceFloats(kN * kClasses);
  float* d_dlogits = DeviceFloats(kN * kClasses);
  float* d_dpool = DeviceFloats(kN * kFeatures);
  float* d_drelu = DeviceFloats(kN * kK * kH * kW);
  float* d_dbn = DeviceFloats(kN * kK * kH * kW);
  float* d_dconv = DeviceFloats(kN * kK * kH * kW);
  // Batch norm: its parameter descriptor derived from the conv output's, gamma 1 and beta 0,
  // running averages, the statistics saved for backward, and the parameters' gradients.
  cudnnTensorDescriptor_t bn_desc;
  DNN_CHECK(cudnnCreateTensorDescriptor(&bn_desc));
  DNN_CHECK(cudnnDeriveBNTensorDescriptor(bn_desc, conv_desc, CUDNN_BATCHNORM_SPATIAL));
  const std::vector<float> ones(kK, 1.0f), zeros(kK, 0.0f);
  float *d_gamma = DeviceFloats(kK), *d_beta = DeviceFloats(kK), *d_running_mean = DeviceFloats(kK),
        *d_running_var = DeviceFloats(kK), *d_save_mean = DeviceFloats(kK),
        *d_save_inv_var = DeviceFloats(kK), *d_dgamma = DeviceFloats(kK),
        *d_dbeta = DeviceFloats(kK);
  for (auto [device, host] : {std::pair{d_gamma, &ones},
                              {d_beta, &zeros},
                              {d_running_mean, &zeros},
                              {d_running_var, &ones}}) {
    CORPUS_CHECK(cudaMemcpy(device, host->data(), kK * sizeof(float), cudaMemcpyHostToDevice));
  }
  CORPUS_CHECK(cudaDeviceSynchronize());  // staged copies again (see the weights above)
  float* d_dw_fc = DeviceFloats(w_fc.size());
  float* d_dw_conv = DeviceFloats(w_conv.size());

  std::vector<Batch> batches(kSteps);
  for (Batch& b : batches) {
    CORPUS_CHECK(cudaMallocHost(&b.images, kN * kH * kW * sizeof(float)));
    CORPUS_CHECK(cudaMallocHost(&b.onehot, kN * kClasses * sizeof(float)));
    b.d_images = DeviceFloats(kN * kH * kW);
    b.d_onehot = DeviceFloats(kN * kClasses);
    CORPUS_CHECK(cudaEventCreateWithFlags(&b.ready, cudaEventDisableTiming));
  }
  std::thread loader([&] {
    CORPUS_CHECK(cudaSetDevice(0));
    for (int step = 0; step < kSteps; ++step) Load(step, copy, &batches[step]);
  });
  loader.join();  // the batches are ready; the training stream still waits on their events

  const float one = 1.0f, zero = 0.0f, inverse_n = 1.0f / kN, minus_inverse_n = -1.0f / kN;
  const float minus_rate = -kRate;
  std::vector<float> probs(kN * kClasses);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    const Batch& b = batches[step];
    CORPUS_CHECK(cudaStreamWaitEvent(stream, b.ready, 0));
    // Forward.
    DNN_CHECK(cudnnConvolutionForward(dnn, &one, x_desc, b.d_images, w_desc, d_w_conv, conv,
                                      fwd_algo, workspace, workspace_bytes, &zero, conv_desc,
                                      d_conv));
    DNN_CHECK(cudnnAddTensor(dnn, &one, bias_desc, d_bias, &one, conv_desc, d_conv));
    DNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
        dnn, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero, conv_desc, d_conv,
        nullptr, nullptr, conv_desc, d_bn, bn_desc, d_gamma, d_beta, 0.1, d_running_mean,
        d_running_var, 1e-5, d_save_mean, d_save_inv_var, nullptr, nullptr, 0, nullptr, 0));
    DNN_CHECK(cudnnActivationForward(dnn, relu, &one, conv_desc, d_bn, &zero, conv_desc, d_relu));
    DNN_CHECK(cudnnPoolingForward(dnn, pooling, &one, conv_desc, d_relu, &zero, pool_desc, d_pool));
    BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kClasses, kN, kFeatures, &one, d_w_fc,
                           kClasses, d_pool, kFeatures, &zero, d_logits, kClasses));
    DNN_CHECK(cudnnSoftmaxForward(dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one,
                                  logits_desc, d_logits, &zero, logits_desc, d_probs));
    CORPUS_CHECK(cudaMemcpyAsync(probs.data(), d_probs, probs.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
    // Backward: dlogits = (p - onehot) / N.
    BLAS_CHECK(cublasSgeam(blas, CUBLAS_OP_N, CUBLAS_OP_N, kClasses, kN, &inverse_n, d_probs,
                           kClasses, &minus_inverse_n, b.d_onehot, kClasses, d_dlogits, kClasses));
    BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, kClasses, kFeatures, kN, &one, d_dlogits,
                           kClasses, d_pool, kFeatures, &zero, d_dw_fc, kClasses));
    BLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, kFeatures, kN, kClasses, &one, d_w_fc,
                           kClasses, d_dlogits, kClasses, &zero, d_dpool, kFeatures));
    DNN_CHECK(cudnnPoolingBackward(dnn, pooling, &one, pool_desc, d_pool, pool_desc, d_dpool,
                                   conv_desc, d_relu, &zero, conv_desc, d_drelu));
    DNN_CHECK(cudnnActivationBackward(dnn, relu, &one, conv_desc, d_relu, conv_desc, d_drelu,
                                      conv_desc, d_bn, &zero, conv_desc, d_dbn));
    DNN_CHECK(cudnnBatchNormalizationBackwardEx(
        dnn, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, conv_desc,
        d_conv, nullptr, nullptr, conv_desc, d_dbn, nullptr, nullptr, conv_desc, d_dconv, bn_desc,
        d_gamma, d_beta, d_dgamma, d_dbeta, 1e-5, d_save_mean, d_save_inv_var, nullptr, nullptr, 0,
        nullptr, 0));
    DNN_CHECK(cudnnConvolutionBackwardFilter(dnn, &one, x_desc, b.d_images, conv_desc, d_dconv,
                                             conv, filter_algo, workspace, workspace_bytes, &zero,
                                             w_desc, d_dw_conv));
    // SGD.
    BLAS_CHECK(
        cublasSaxpy(blas, static_cast<int>(w_fc.size()), &minus_rate, d_dw_fc, 1, d_w_fc, 1));
    BLAS_CHECK(
        cublasSaxpy(blas, static_cast<int>(w_conv.size()), &minus_rate, d_dw_conv, 1, d_w_conv, 1));
    BLAS_CHECK(cublasSaxpy(blas, kK, &minus_rate, d_dgamma, 1, d_gamma, 1));
    BLAS_CHECK(cublasSaxpy(blas, kK, &minus_rate, d_dbeta, 1, d_beta, 1));
    CORPUS_CHECK(cudaStreamSynchronize(stream));
    if (step == 0) {
      // The first batch's normalised activations: mean 0 and variance 1 in every channel.
      std::vector<float> normalized(kN * kK * kH * kW);
      CORPUS_CHECK(cudaMemcpy(normalized.data(), d_bn, normalized.size() * sizeof(float),
                              cudaMemcpyDeviceToHost));
      for (int k = 0; k < kK; ++k) {
        double sum = 0, squares = 0;
        for (int sample = 0; sample < kN; ++sample) {
          for (int i = 0; i < kH * kW; ++i) {
            const double v = normalized[(static_cast<size_t>(sample) * kK + k) * kH * kW + i];
            sum += v;
            squares += v * v;
          }
        }
        const double count = double{kN} * kH * kW, mean = sum / count;
        if (std::fabs(mean) > 1e-4 || std::fabs(squares / count - mean * mean - 1) > 1e-3) {
          std::fprintf(stderr, "cudnn_cnn: channel %d normalised to mean %g, variance %g\n", k,
                       mean, squares / count - mean * mean);
          return 1;
        }
      }
    }
    double loss = 0;
    for (int s = 0; s < kN; ++s) {
      for (int k = 0; k < kClasses; ++k) {
        if (b.onehot[s * kClasses + k] != 0) loss -= std::log(probs[s * kClasses + k]);
      }
    }
    loss /= kN;
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "cudnn_cnn: step %d: loss %g\n", step, loss);
      return 1;
    }
    std::printf("step %d: loss %.6f\n", step, loss);
    losses.push_back(loss);
  }

  std::vector<float> result(w_fc.size() + w_conv.size());
  CORPUS_CHECK(
      cudaMemcpy(result.data(), d_w_fc, w_fc.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(result.data() + w_fc.size(), d_w_conv, w_conv.size() * sizeof(float),
                          cudaMemcpyDeviceToHost));
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));

  for (Batch& b : batches) {
    CORPUS_CHECK(cudaEventDestroy(b.ready));
    CORPUS_CHECK(cudaFree(b.d_onehot));
    CORPUS_CHECK(cudaFree(b.d_images));
    CORPUS_CHECK(cudaFreeHost(b.onehot));
    CORPUS_CHECK(cudaFreeHost(b.images));
  }
  for (float* p : {d_w_conv,       d_bias,        d_w_fc,      d_conv,         d_bn,     d_relu,
                   d_pool,         d_logits,      d_probs,     d_dlogits,      d_dpool,  d_drelu,
                   d_dbn,          d_dconv,       d_dw_fc,     d_dw_conv,      d_gamma,  d_beta,
                   d_running_mean, d_running_var, d_save_mean, d_save_inv_var, d_dgamma, d_dbeta}) {
    CORPUS_CHECK(cudaFree(p));
  }
  if (workspace != nullptr) CORPUS_CHECK(cudaFree(workspace));
  DNN_CHECK(cudnnDestroyPoolingDescriptor(pooling));
  DNN_CHECK(cudnnDestroyActivationDescriptor(relu));
  DNN_CHECK(cudnnDestroyConvolutionDescriptor(conv));
  DNN_CHECK(cudnnDestroyFilterDescriptor(w_desc));
  for (cudnnTensorDescriptor_t d :
       {x_desc, conv_desc, pool_desc, logits_desc, bias_desc, bn_desc}) {
    DNN_CHECK(cudnnDestroyTensorDescriptor(d));
  }
  BLAS_CHECK(cublasDestroy(blas));
  DNN_CHECK(cudnnDestroy(dnn));
  CORPUS_CHECK(cudaStreamDestroy(copy));
  CORPUS_CHECK(cudaStreamDestroy(stream));
  return 0;
}
