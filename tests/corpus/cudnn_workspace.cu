// cudnn_workspace: a convolution layer trained for a few steps through cuDNN's legacy API, as
// PyTorch's cudnn_convolution does with cudnn.benchmark=True: cudnnFind* benchmarks each
// direction once, the workspace for every call comes from the caching allocator (taken before the
// call, returned after it), the weights are updated in place by a kernel. Which algorithm runs:
// the benchmark's list filtered as torch.backends.cudnn.deterministic=True filters it (status
// success, CUDNN_DETERMINISTIC, fits the workspace cap), taking the lowest algorithm number so
// that the choice does not depend on the benchmark's timing noise. --plant: backward filter runs
// CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, which cuDNN documents as nondeterministic (it accumulates
// with atomics). The adjoint identity <conv(x, w), dy> = <x, dx> = <w, dw> is checked on the
// host for the first step.
#include <cudnn.h>

#include <cmath>
#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"
#include "corpus_kernels.cuh"

namespace {

constexpr size_t kWorkspaceCap = size_t{4} << 20;

// The lowest-numbered entry of a cudnnFind* result that succeeded, is deterministic and fits.
template <typename Perf>
int Choose(const Perf* perf, int count) {
  int chosen = -1;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
        perf[i].memory > kWorkspaceCap) {
      continue;
    }
    if (chosen < 0 || static_cast<int>(perf[i].algo) < chosen) chosen = perf[i].algo;
  }
  if (chosen < 0) {
    std::fprintf(stderr, "cudnn_workspace: no deterministic algorithm\n");
    std::exit(2);
  }
  return chosen;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += double(a[i]) * b[i];
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  constexpr int kN = 2, kC = 3, kH = 8, kW = 8, kK = 4, kR = 3, kS = 3, kSteps = 3;
  corpus::CachingAllocator allocator;
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));
  cudnnTensorDescriptor_t x_desc, y_desc;
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateTensorDescriptor(&x_desc));
  DNN_CHECK(cudnnCreateTensorDescriptor(&y_desc));
  DNN_CHECK(cudnnCreateFilterDescriptor(&w_desc));
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  DNN_CHECK(cudnnSetTensor4dDescriptor(x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kC, kH, kW));
  DNN_CHECK(cudnnSetFilter4dDescriptor(w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kK, kC, kR, kS));
  DNN_CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  int n, k, p, q;
  DNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x_desc, w_desc, &n, &k, &p, &q));
  DNN_CHECK(cudnnSetTensor4dDescriptor(y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, p, q));
  const size_t x_count = size_t{kN} * kC * kH * kW, w_count = size_t{kK} * kC * kR * kS,
               y_count = static_cast<size_t>(n) * k * p * q;

  const std::vector<float> x = corpus::MixedValues(x_count, 11);
  const std::vector<float> w0 = corpus::MixedValues(w_count, 12);
  const std::vector<float> dy = corpus::MixedValues(y_count, 13);
  auto tensor = [&](size_t count) {
    return static_cast<float*>(allocator.Allocate(count * sizeof(float), stream));
  };
  float *d_x = tensor(x_count), *d_w = tensor(w_count), *d_dy = tensor(y_count);
  CORPUS_CHECK(cudaMemcpyAsync(d_x, x.data(), x_count * 4, cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_w, w0.data(), w_count * 4, cudaMemcpyHostToDevice, stream));
  CORPUS_CHECK(cudaMemcpyAsync(d_dy, dy.data(), y_count * 4, cudaMemcpyHostToDevice, stream));

  // The benchmark, once per direction (cudnn.benchmark caches it per shape).
  cudnnConvolutionFwdAlgoPerf_t fwd[8];
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data[8];
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[8];
  int fwd_count = 0, data_count = 0, filter_count = 0;
  DNN_CHECK(cudnnFindConvolutionForwardAlgorithm(handle, x_desc, w_desc, conv, y_desc, 8,
                                                 &fwd_count, fwd));
  DNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(handle, w_desc, y_desc, conv, x_desc, 8,
                                                      &data_count, bwd_data));
  DNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(handle, x_desc, y_desc, conv, w_desc, 8,
                                                        &filter_count, bwd_filter));
  const auto fwd_algo = static_cast<cudnnConvolutionFwdAlgo_t>(Choose(fwd, fwd_count));
  const auto data_algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(Choose(bwd_data, data_count));
  const auto filter_algo = plant ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0
                                 : static_cast<cudnnConvolutionBwdFilterAlgo_t>(
                                       Choose(bwd_filter, filter_count));
  size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
  DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc, w_desc, conv, y_desc,
                                                    fwd_algo, &fwd_bytes));
  DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_desc, y_desc, conv, x_desc,
                                                         data_algo, &data_bytes));
  DNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_desc, y_desc, conv, w_desc,
                                                           filter_algo, &filter_bytes));

  float *d_y = tensor(y_count), *d_dx = tensor(x_count), *d_dw = tensor(w_count);
  std::vector<float> history;
  const float one = 1.0f, zero = 0.0f;
  for (int step = 0; step < kSteps; ++step) {
    auto run = [&](size_t bytes, auto&& call) {
      void* workspace = bytes > 0 ? allocator.Allocate(bytes, stream) : nullptr;
      call(workspace);
      allocator.Free(workspace);  // back to the stream's free list; stream order keeps it safe
    };
    run(fwd_bytes, [&](void* ws) {
      DNN_CHECK(cudnnConvolutionForward(handle, &one, x_desc, d_x, w_desc, d_w, conv, fwd_algo, ws,
                                        fwd_bytes, &zero, y_desc, d_y));
    });
    run(data_bytes, [&](void* ws) {
      DNN_CHECK(cudnnConvolutionBackwardData(handle, &one, w_desc, d_w, y_desc, d_dy, conv,
                                             data_algo, ws, data_bytes, &zero, x_desc, d_dx));
    });
    run(filter_bytes, [&](void* ws) {
      DNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, x_desc, d_x, y_desc, d_dy, conv,
                                               filter_algo, ws, filter_bytes, &zero, w_desc, d_dw));
    });
    std::vector<float> y(y_count), dx(x_count), dw(w_count), w(w_count);
    CORPUS_CHECK(cudaMemcpyAsync(y.data(), d_y, y_count * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaMemcpyAsync(dx.data(), d_dx, x_count * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaMemcpyAsync(dw.data(), d_dw, w_count * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaMemcpyAsync(w.data(), d_w, w_count * 4, cudaMemcpyDeviceToHost, stream));
    CORPUS_CHECK(cudaStreamSynchronize(stream));
    const double y_dy = Dot(y, dy), x_dx = Dot(x, dx), w_dw = Dot(w, dw);
    if (std::fabs(x_dx - y_dy) > 1e-4 * (1 + std::fabs(y_dy)) ||
        std::fabs(w_dw - y_dy) > 1e-4 * (1 + std::fabs(y_dy))) {
      std::fprintf(stderr, "step %d: not adjoint: %.9g %.9g %.9g\n", step, y_dy, x_dx, w_dw);
      return 1;
    }
    history.insert(history.end(), y.begin(), y.end());
    history.insert(history.end(), dw.begin(), dw.end());
    // SGD step on the weights, in place.
    CorpusAxpby<<<corpus::Blocks(static_cast<int>(w_count)), corpus::kThreads, 0, stream>>>(
        -1e-3f, d_dw, 1.0f, d_w, static_cast<int>(w_count));
    CORPUS_CHECK(cudaGetLastError());
  }
  std::printf("algos forward %d backward_data %d backward_filter %d\n", fwd_algo, data_algo,
              filter_algo);
  ndt::programs::PrintChecksum(history.data(), history.size() * sizeof(float));
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroyFilterDescriptor(w_desc);
  cudnnDestroyTensorDescriptor(y_desc);
  cudnnDestroyTensorDescriptor(x_desc);
  cudnnDestroy(handle);
  cudaStreamDestroy(stream);
  return 0;
}
