// One convolution layer's forward and backward pass through cuDNN's legacy API, the way a
// framework drives it: cudnnConvolutionForward, cudnnConvolutionBackwardData and
// cudnnConvolutionBackwardFilter on fixed inputs, algorithms either fixed or chosen by the
// cudnnFind* benchmark (PyTorch's cudnn.benchmark=True).
//
//   conv_legacy [--benchmark | --find-ex | --heuristic] [--algo N] [--workspace BYTES]
//               [--contiguous-dy] [ITERATIONS]
//
// Default algorithms: forward IMPLICIT_PRECOMP_GEMM, backward data ALGO_1, backward filter
// ALGO_0 (nondeterministic, the common case in PyTorch); --algo N sets the backward-filter one.
// --benchmark takes the fastest algorithm cudnnFind*Algorithm reports for each direction;
// --find-ex does the same with cudnnFind*AlgorithmEx on the program's own buffers and
// workspace (as PyTorch does); --heuristic takes the first usable cudnnGet*Algorithm_v7 entry.
// The workspace is the larger of what the chosen algorithms need and 1 MiB (a framework's
// workspace budget), or exactly BYTES. Each iteration recomputes y and dx and accumulates dw
// (beta = 1 after the first). y and dy are stored with padded rows; the backward passes read a
// contiguous copy of dy (as PyTorch makes grad_output contiguous) with --contiguous-dy, or when
// this cuDNN supports no backward-data algorithm for the padded one (cuDNN 9.19 on an H200).
// Prints the chosen algorithms and the checksum of y, dx and dw.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program_checksum.h"

namespace {

constexpr int kN = 4, kC = 3, kH = 16, kW = 16, kK = 8, kR = 3, kS = 3;

bool Ok(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "conv_legacy: %s: %s\n", what, cudnnGetErrorString(status));
  return false;
}

bool Ok(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "conv_legacy: %s: %s\n", what, cudaGetErrorString(error));
  return false;
}

// Fixed inputs in [-1, 1): a linear congruential sequence.
std::vector<float> Values(size_t count, uint32_t seed) {
  std::vector<float> values(count);
  uint32_t state = seed;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    value = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return values;
}

float* DeviceCopy(const std::vector<float>& host) {
  void* device = nullptr;
  if (!Ok(cudaMalloc(&device, host.size() * sizeof(float)), "cudaMalloc")) return nullptr;
  if (!Ok(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy")) {
    return nullptr;
  }
  return static_cast<float*>(device);
}

// The first successful entry of a Find* result list, or -1.
template <typename Perf>
int Fastest(const Perf* results, int count) {
  for (int i = 0; i < count; ++i) {
    if (results[i].status == CUDNN_STATUS_SUCCESS) return static_cast<int>(results[i].algo);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  enum class Selection { kFixed, kFind, kFindEx, kHeuristic } selection = Selection::kFixed;
  int filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  long long workspace_override = -1;
  bool contiguous_dy = false;
  int iterations = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--benchmark") {
      selection = Selection::kFind;
    } else if (arg == "--find-ex") {
      selection = Selection::kFindEx;
    } else if (arg == "--heuristic") {
      selection = Selection::kHeuristic;
    } else if (arg == "--algo" && i + 1 < argc) {
      filter_algo = std::atoi(argv[++i]);
    } else if (arg == "--workspace" && i + 1 < argc) {
      workspace_override = std::atoll(argv[++i]);
    } else if (arg == "--contiguous-dy") {
      contiguous_dy = true;
    } else if (!arg.empty() && arg[0] != '-') {
      iterations = std::max(1, std::atoi(arg.c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: conv_legacy [--benchmark | --find-ex | --heuristic] [--algo N] "
                   "[--workspace BYTES] [--contiguous-dy] [ITERATIONS]\n");
      return 2;
    }
  }

  cudnnHandle_t handle;
  if (!Ok(cudnnCreate(&handle), "cudnnCreate")) return 1;
  cudaStream_t stream;
  if (!Ok(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
  if (!Ok(cudnnSetStream(handle, stream), "cudnnSetStream")) return 1;

  cudnnTensorDescriptor_t x_desc, y_desc;
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t conv;
  if (!Ok(cudnnCreateTensorDescriptor(&x_desc), "cudnnCreateTensorDescriptor") ||
      !Ok(cudnnCreateTensorDescriptor(&y_desc), "cudnnCreateTensorDescriptor") ||
      !Ok(cudnnCreateFilterDescriptor(&w_desc), "cudnnCreateFilterDescriptor") ||
      !Ok(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor")) {
    return 1;
  }
  if (!Ok(cudnnSetTensor4dDescriptor(x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kN, kC, kH, kW),
          "cudnnSetTensor4dDescriptor") ||
      !Ok(cudnnSetFilter4dDescriptor(w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kK, kC, kR, kS),
          "cudnnSetFilter4dDescriptor") ||
      !Ok(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor") ||
      !Ok(cudnnSetConvolutionMathType(conv, CUDNN_DEFAULT_MATH), "cudnnSetConvolutionMathType")) {
    return 1;
  }
  int n, k, p, q;
  if (!Ok(cudnnGetConvolution2dForwardOutputDim(conv, x_desc, w_desc, &n, &k, &p, &q),
          "cudnnGetConvolution2dForwardOutputDim")) {
    return 1;
  }
  // y (and dy) are stored with padded rows, through the strided descriptor call.
  const int row = q + 1;
  if (!Ok(cudnnSetTensor4dDescriptorEx(y_desc, CUDNN_DATA_FLOAT, n, k, p, q, k * p * row, p * row,
                                       row, 1),
          "cudnnSetTensor4dDescriptorEx")) {
    return 1;
  }
  const size_t x_count = static_cast<size_t>(kN) * kC * kH * kW;
  const size_t w_count = static_cast<size_t>(kK) * kC * kR * kS;
  const size_t y_count = static_cast<size_t>(n) * k * p * row;

  float* x = DeviceCopy(Values(x_count, 1));
  float* w = DeviceCopy(Values(w_count, 2));
  float* dy = DeviceCopy(Values(y_count, 3));
  float* y = DeviceCopy(std::vector<float>(y_count, 0.0f));
  float* dx = DeviceCopy(std::vector<float>(x_count, 0.0f));
  float* dw = DeviceCopy(std::vector<float>(w_count, 0.0f));
  if (!x || !w || !dy || !y || !dx || !dw) return 1;
  // What the backward passes read dy through: the padded y_desc, or a contiguous copy.
  cudnnTensorDescriptor_t dy_desc = y_desc;
  float* dy_read = dy;
  float* dy_packed = nullptr;
  cudnnTensorDescriptor_t packed_desc = nullptr;
  const auto use_contiguous_dy = [&]() -> bool {
    std::vector<float> packed;
    const std::vector<float> padded = Values(y_count, 3);
    for (size_t i = 0; i < y_count; ++i) {
      if (static_cast<int>(i % static_cast<size_t>(row)) < q) packed.push_back(padded[i]);
    }
    dy_packed = DeviceCopy(packed);
    if (dy_packed == nullptr ||
        !Ok(cudnnCreateTensorDescriptor(&packed_desc), "cudnnCreateTensorDescriptor") ||
        !Ok(cudnnSetTensor4dDescriptor(packed_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, p,
                                       q),
            "cudnnSetTensor4dDescriptor")) {
      return false;
    }
    dy_desc = packed_desc;
    dy_read = dy_packed;
    std::printf("dy made contiguous for the backward passes\n");
    return true;
  };
  if (contiguous_dy && !use_contiguous_dy()) return 1;
  const size_t budget =
      workspace_override >= 0 ? static_cast<size_t>(workspace_override) : size_t{1} << 20;
  void* workspace = nullptr;
  if (budget > 0 && !Ok(cudaMalloc(&workspace, budget), "cudaMalloc")) return 1;

  int fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  int data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  if (selection != Selection::kFixed) {
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    const int fwd_max = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    const int data_max = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    const int filter_max = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    switch (selection) {
      case Selection::kFind:
        status = cudnnFindConvolutionForwardAlgorithm(handle, x_desc, w_desc, conv, y_desc, fwd_max,
                                                      &count, fwd);
        break;
      case Selection::kFindEx:
        status = cudnnFindConvolutionForwardAlgorithmEx(handle, x_desc, x, w_desc, w, conv, y_desc,
                                                        y, fwd_max, &count, fwd, workspace, budget);
        break;
      default:
        status = cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc, w_desc, conv, y_desc,
                                                        fwd_max, &count, fwd);
    }
    if (!Ok(status, "forward algorithm query")) return 1;
    fwd_algo = Fastest(fwd, count);
    switch (selection) {
      case Selection::kFind:
        status = cudnnFindConvolutionBackwardDataAlgorithm(handle, w_desc, dy_desc, conv, x_desc,
                                                           data_max, &count, data);
        break;
      case Selection::kFindEx:
        status = cudnnFindConvolutionBackwardDataAlgorithmEx(handle, w_desc, w, dy_desc, dy_read,
                                                             conv, x_desc, dx, data_max, &count,
                                                             data, workspace, budget);
        break;
      default:
        status = cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc, dy_desc, conv, x_desc,
                                                             data_max, &count, data);
    }
    if (!Ok(status, "backward data algorithm query")) return 1;
    data_algo = Fastest(data, count);
    switch (selection) {
      case Selection::kFind:
        status = cudnnFindConvolutionBackwardFilterAlgorithm(handle, x_desc, dy_desc, conv, w_desc,
                                                             filter_max, &count, filter);
        break;
      case Selection::kFindEx:
        status = cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, x_desc, x, dy_desc, dy_read,
                                                               conv, w_desc, dw, filter_max, &count,
                                                               filter, workspace, budget);
        break;
      default:
        status = cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x_desc, dy_desc, conv,
                                                               w_desc, filter_max, &count, filter);
    }
    if (!Ok(status, "backward filter algorithm query")) return 1;
    filter_algo = Fastest(filter, count);
    if (fwd_algo < 0 || data_algo < 0 || filter_algo < 0) {
      std::fprintf(stderr, "conv_legacy: the algorithm query found no usable algorithm\n");
      return 1;
    }
  }

  size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
  // A fixed backward-data algorithm this cuDNN does not support for the padded dy (cuDNN 9.19 on
  // an H200 refuses BWD_DATA_ALGO_1 there, and its heuristics list none): a contiguous dy, then
  // the first algorithm its heuristics list as supported, as a framework falls back.
  const auto data_supported = [&] {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(
               handle, w_desc, dy_desc, conv, x_desc,
               static_cast<cudnnConvolutionBwdDataAlgo_t>(data_algo),
               &data_bytes) != CUDNN_STATUS_NOT_SUPPORTED;
  };
  if (selection == Selection::kFixed && !data_supported()) {
    std::printf("backward data algo %d not supported for the padded dy\n", data_algo);
    if (!contiguous_dy && !use_contiguous_dy()) return 1;
  }
  if (selection == Selection::kFixed && !data_supported()) {
    cudnnConvolutionBwdDataAlgoPerf_t listed[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    if (!Ok(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc, dy_desc, conv, x_desc,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                        &count, listed),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7")) {
      return 1;
    }
    const int fallback = Fastest(listed, count);
    if (fallback < 0) {
      std::fprintf(stderr, "conv_legacy: no backward data algorithm supports these tensors\n");
      return 1;
    }
    std::printf("backward data algo %d not supported here: algo %d\n", data_algo, fallback);
    data_algo = fallback;
  }
  if (!Ok(cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc, w_desc, conv, y_desc,
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(fwd_algo),
                                                  &fwd_bytes),
          "cudnnGetConvolutionForwardWorkspaceSize") ||
      !Ok(cudnnGetConvolutionBackwardDataWorkspaceSize(
              handle, w_desc, dy_desc, conv, x_desc,
              static_cast<cudnnConvolutionBwdDataAlgo_t>(data_algo), &data_bytes),
          "cudnnGetConvolutionBackwardDataWorkspaceSize") ||
      !Ok(cudnnGetConvolutionBackwardFilterWorkspaceSize(
              handle, x_desc, dy_desc, conv, w_desc,
              static_cast<cudnnConvolutionBwdFilterAlgo_t>(filter_algo), &filter_bytes),
          "cudnnGetConvolutionBackwardFilterWorkspaceSize")) {
    return 1;
  }
  size_t workspace_bytes = budget;
  if (workspace_override < 0 && std::max({fwd_bytes, data_bytes, filter_bytes}) > budget) {
    workspace_bytes = std::max({fwd_bytes, data_bytes, filter_bytes});
    cudaFree(workspace);
    if (!Ok(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc")) return 1;
  }

  const float one = 1.0f, zero = 0.0f;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    if (!Ok(cudnnConvolutionForward(handle, &one, x_desc, x, w_desc, w, conv,
                                    static_cast<cudnnConvolutionFwdAlgo_t>(fwd_algo), workspace,
                                    workspace_bytes, &zero, y_desc, y),
            "cudnnConvolutionForward") ||
        !Ok(cudnnConvolutionBackwardData(handle, &one, w_desc, w, dy_desc, dy_read, conv,
                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(data_algo),
                                         workspace, workspace_bytes, &zero, x_desc, dx),
            "cudnnConvolutionBackwardData") ||
        !Ok(cudnnConvolutionBackwardFilter(
                handle, &one, x_desc, x, dy_desc, dy_read, conv,
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(filter_algo), workspace,
                workspace_bytes, iteration == 0 ? &zero : &one, w_desc, dw),
            "cudnnConvolutionBackwardFilter")) {
      return 1;
    }
  }
  if (!Ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;

  std::vector<float> result(y_count + x_count + w_count);
  if (!Ok(cudaMemcpy(result.data(), y, y_count * sizeof(float), cudaMemcpyDeviceToHost),
          "cudaMemcpy") ||
      !Ok(cudaMemcpy(result.data() + y_count, dx, x_count * sizeof(float), cudaMemcpyDeviceToHost),
          "cudaMemcpy") ||
      !Ok(cudaMemcpy(result.data() + y_count + x_count, dw, w_count * sizeof(float),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy")) {
    return 1;
  }
  // Only y's real columns count: the padding column of each row is never written.
  std::vector<float> packed;
  packed.reserve(result.size());
  for (size_t i = 0; i < y_count; ++i) {
    if (static_cast<int>(i % static_cast<size_t>(row)) < q) packed.push_back(result[i]);
  }
  packed.insert(packed.end(), result.begin() + static_cast<std::ptrdiff_t>(y_count), result.end());
  std::printf("algos forward %d backward_data %d backward_filter %d workspace %zu\n", fwd_algo,
              data_algo, filter_algo, workspace_bytes);
  // The three directions are adjoint: <conv(x, w), dy> = <x, dx> = <w, dw> (dw summed over the
  // iterations), equal up to rounding whatever the algorithms. A check of the results that needs
  // no reference values.
  const std::vector<float> host_x = Values(x_count, 1), host_w = Values(w_count, 2),
                           host_dy = Values(y_count, 3);
  double y_dy = 0, x_dx = 0, w_dw = 0;
  for (size_t i = 0; i < y_count; ++i) {
    if (static_cast<int>(i % static_cast<size_t>(row)) < q) y_dy += double{result[i]} * host_dy[i];
  }
  for (size_t i = 0; i < x_count; ++i) x_dx += double{result[y_count + i]} * host_x[i];
  for (size_t i = 0; i < w_count; ++i) w_dw += double{result[y_count + x_count + i]} * host_w[i];
  std::printf("adjoint %.9g %.9g %.9g\n", y_dy, x_dx, w_dw / iterations);
  ndt::programs::PrintChecksum(packed.data(), packed.size() * sizeof(float));

  cudaFree(x);
  cudaFree(w);
  cudaFree(dy);
  if (dy_packed != nullptr) cudaFree(dy_packed);
  cudaFree(y);
  cudaFree(dx);
  cudaFree(dw);
  if (workspace != nullptr) cudaFree(workspace);
  cudnnDestroyTensorDescriptor(x_desc);
  cudnnDestroyTensorDescriptor(y_desc);
  if (packed_desc != nullptr) cudnnDestroyTensorDescriptor(packed_desc);
  cudnnDestroyFilterDescriptor(w_desc);
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroy(handle);
  cudaStreamDestroy(stream);
  return 0;
}
