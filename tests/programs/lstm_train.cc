// A few training steps of a recurrent network through cuDNN's RNN API, called as PyTorch's
// torch.nn.LSTM (GRU, RNN) training calls it (aten/src/ATen/native/cudnn/RNN.cpp): the dropout
// states initialised once with cudnnSetDropoutDescriptor (the seed) and restored with
// cudnnRestoreDropoutDescriptor at every call; per step an RNN descriptor
// (cudnnSetRNNDescriptor_v8), data descriptors for x and y, 3-d descriptors for the hidden and
// cell states, cudnnGetRNNTempSpaceSizes, cudnnRNNForward in training mode with a reserve space,
// cudnnRNNBackwardData_v8, then cudnnRNNBackwardWeights_v8 adding into a zeroed weight gradient
// (CUDNN_WGRAD_MODE_ADD), and an SGD update of the weight space on the host.
//
//   lstm_train [--mode lstm|gru|rnn_tanh|rnn_relu] [--algo standard|persist_static|
//              persist_dynamic|persist_static_small_h] [--layers L] [--dropout P] [--seed S]
//              [--steps K] [--gradcheck]
//
// Defaults: LSTM, 2 layers, dropout 0.25 with seed 42, 3 steps, CUDNN_RNN_ALGO_PERSIST_STATIC
// (on the stand-in its weight gradients race: the planted nondeterminism). --gradcheck (dropout
// off, one step) prints the weight and input gradients' directional derivatives next to finite
// differences of the loss computed with inference-mode forwards. Prints the algorithm and the
// checksum of the last step's y and the final weights.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program_checksum.h"

namespace {

constexpr int kSeq = 6, kBatch = 4, kInput = 5, kHidden = 8;
constexpr float kLearningRate = 0.1f;

bool Ok(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "lstm_train: %s: %s\n", what, cudnnGetErrorString(status));
  return false;
}

bool Ok(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "lstm_train: %s: %s\n", what, cudaGetErrorString(error));
  return false;
}

// Fixed values in [-scale, scale): a linear congruential sequence.
std::vector<float> Values(size_t count, uint32_t seed, float scale) {
  std::vector<float> values(count);
  uint32_t state = seed;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    value = scale * (static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f);
  }
  return values;
}

struct Device {
  void* pointer = nullptr;
  size_t bytes = 0;
};

bool Allocate(Device* device, size_t bytes) {
  device->bytes = bytes;
  return Ok(cudaMalloc(&device->pointer, bytes == 0 ? 1 : bytes), "cudaMalloc");
}

bool Upload(const Device& device, const std::vector<float>& host) {
  return Ok(
      cudaMemcpy(device.pointer, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy");
}

bool Download(std::vector<float>* host, const Device& device) {
  return Ok(cudaMemcpy(host->data(), device.pointer, host->size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy");
}

struct Options {
  cudnnRNNMode_t mode = CUDNN_LSTM;
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_PERSIST_STATIC;
  int layers = 2;
  float dropout = 0.25f;
  unsigned long long seed = 42;
  int steps = 3;
  bool gradcheck = false;
};

const char* AlgoName(cudnnRNNAlgo_t algo) {
  switch (algo) {
    case CUDNN_RNN_ALGO_STANDARD:
      return "CUDNN_RNN_ALGO_STANDARD";
    case CUDNN_RNN_ALGO_PERSIST_STATIC:
      return "CUDNN_RNN_ALGO_PERSIST_STATIC";
    case CUDNN_RNN_ALGO_PERSIST_DYNAMIC:
      return "CUDNN_RNN_ALGO_PERSIST_DYNAMIC";
    case CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H:
      return "CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H";
    default:
      return "?";
  }
}

// The network: its handle, dropout state, weights and the buffers of one step.
class Network {
 public:
  explicit Network(const Options& options) : o_(options) {}

  bool Init() {
    // The CUDA context first, as PyTorch has it before its first cuDNN handle.
    if (!Ok(cudaFree(nullptr), "cudaFree") || !Ok(cudnnCreate(&handle_), "cudnnCreate")) {
      return false;
    }
    size_t states_bytes = 0;
    if (!Ok(cudnnDropoutGetStatesSize(handle_, &states_bytes), "cudnnDropoutGetStatesSize") ||
        !Allocate(&states_, states_bytes) ||
        !Ok(cudnnCreateDropoutDescriptor(&dropout_), "cudnnCreateDropoutDescriptor") ||
        !Ok(cudnnSetDropoutDescriptor(dropout_, handle_, o_.dropout, states_.pointer, states_.bytes,
                                      o_.seed),
            "cudnnSetDropoutDescriptor")) {
      return false;
    }
    if (!Describe()) return false;
    size_t weight_bytes = 0;
    if (!Ok(cudnnGetRNNWeightSpaceSize(handle_, rnn_, &weight_bytes),
            "cudnnGetRNNWeightSpaceSize")) {
      return false;
    }
    weights_host_ = Values(weight_bytes / sizeof(float), 7, 0.4f);
    const size_t data = static_cast<size_t>(kSeq) * kBatch;
    const size_t state = static_cast<size_t>(o_.layers) * kBatch * kHidden;
    x_host_ = Values(data * kInput, 11, 1.0f);
    target_ = Values(data * kHidden, 13, 0.5f);
    hx_host_ = Values(state, 17, 0.3f);
    cx_host_ = Values(state, 19, 0.3f);
    return Allocate(&weights_, weight_bytes) && Allocate(&dweights_, weight_bytes) &&
           Allocate(&x_, data * kInput * 4) && Allocate(&dx_, data * kInput * 4) &&
           Allocate(&y_, data * kHidden * 4) && Allocate(&dy_, data * kHidden * 4) &&
           Allocate(&hx_, state * 4) && Allocate(&cx_, state * 4) && Allocate(&hy_, state * 4) &&
           Allocate(&cy_, state * 4) && Allocate(&dhy_, state * 4) && Allocate(&dcy_, state * 4) &&
           Allocate(&dhx_, state * 4) && Allocate(&dcx_, state * 4) &&
           Upload(weights_, weights_host_) && Upload(x_, x_host_) && Upload(hx_, hx_host_) &&
           Upload(cx_, cx_host_) && Ok(cudaMemset(dhy_.pointer, 0, state * 4), "cudaMemset") &&
           Ok(cudaMemset(dcy_.pointer, 0, state * 4), "cudaMemset") && Release();
  }

  // The descriptors of one call, as PyTorch builds them for every call.
  bool Describe() {
    if (!Ok(cudnnRestoreDropoutDescriptor(dropout_, handle_, o_.dropout, states_.pointer,
                                          states_.bytes, 0),
            "cudnnRestoreDropoutDescriptor") ||
        !Ok(cudnnCreateRNNDescriptor(&rnn_), "cudnnCreateRNNDescriptor") ||
        !Ok(cudnnSetRNNDescriptor_v8(rnn_, o_.algo, o_.mode, CUDNN_RNN_DOUBLE_BIAS,
                                     CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                     CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH, kInput, kHidden, kHidden,
                                     o_.layers, dropout_, CUDNN_RNN_PADDED_IO_DISABLED),
            "cudnnSetRNNDescriptor_v8")) {
      return false;
    }
    if (o_.algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC &&
        !Ok(cudnnBuildRNNDynamic(handle_, rnn_, kBatch), "cudnnBuildRNNDynamic")) {
      return false;
    }
    std::vector<int> lengths(kBatch, kSeq);
    float fill = 0;
    const int dims[3] = {o_.layers, kBatch, kHidden};
    const int strides[3] = {kBatch * kHidden, kHidden, 1};
    return Ok(cudnnCreateRNNDataDescriptor(&x_desc_), "cudnnCreateRNNDataDescriptor") &&
           Ok(cudnnCreateRNNDataDescriptor(&y_desc_), "cudnnCreateRNNDataDescriptor") &&
           Ok(cudnnSetRNNDataDescriptor(x_desc_, CUDNN_DATA_FLOAT,
                                        CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, kSeq, kBatch,
                                        kInput, lengths.data(), &fill),
              "cudnnSetRNNDataDescriptor") &&
           Ok(cudnnSetRNNDataDescriptor(y_desc_, CUDNN_DATA_FLOAT,
                                        CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, kSeq, kBatch,
                                        kHidden, lengths.data(), &fill),
              "cudnnSetRNNDataDescriptor") &&
           Ok(cudnnCreateTensorDescriptor(&h_desc_), "cudnnCreateTensorDescriptor") &&
           Ok(cudnnSetTensorNdDescriptor(h_desc_, CUDNN_DATA_FLOAT, 3, dims, strides),
              "cudnnSetTensorNdDescriptor");
  }

  bool Release() {
    bool ok = Ok(cudnnDestroyRNNDataDescriptor(x_desc_), "cudnnDestroyRNNDataDescriptor") &&
              Ok(cudnnDestroyRNNDataDescriptor(y_desc_), "cudnnDestroyRNNDataDescriptor") &&
              Ok(cudnnDestroyTensorDescriptor(h_desc_), "cudnnDestroyTensorDescriptor") &&
              Ok(cudnnDestroyRNNDescriptor(rnn_), "cudnnDestroyRNNDescriptor");
    x_desc_ = y_desc_ = nullptr;
    h_desc_ = nullptr;
    rnn_ = nullptr;
    return ok;
  }

  // Forward (training with a reserve space, or inference) of the current weights and x.
  bool Forward(bool training, Device* workspace, Device* reserve) {
    size_t workspace_bytes = 0, reserve_bytes = 0;
    const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
    if (!Ok(cudnnGetRNNTempSpaceSizes(handle_, rnn_, mode, x_desc_, &workspace_bytes,
                                      &reserve_bytes),
            "cudnnGetRNNTempSpaceSizes") ||
        !Allocate(workspace, workspace_bytes) || !Allocate(reserve, reserve_bytes)) {
      return false;
    }
    return Ok(cudnnRNNForward(handle_, rnn_, mode, nullptr, x_desc_, x_.pointer, y_desc_,
                              y_.pointer, h_desc_, hx_.pointer, hy_.pointer, h_desc_, cx_.pointer,
                              cy_.pointer, weights_.bytes, weights_.pointer, workspace->bytes,
                              workspace->pointer, reserve->bytes, reserve->pointer),
              "cudnnRNNForward");
  }

  // 0.5 * sum (y - target)^2 of an inference forward; y's gradient in *dy when asked.
  bool Loss(double* loss, std::vector<float>* dy) {
    std::vector<float> y(target_.size());
    if (!Download(&y, y_)) return false;
    *loss = 0;
    if (dy != nullptr) dy->resize(y.size());
    for (size_t i = 0; i < y.size(); ++i) {
      const double d = static_cast<double>(y[i]) - target_[i];
      *loss += 0.5 * d * d;
      if (dy != nullptr) (*dy)[i] = static_cast<float>(d);
    }
    return true;
  }

  // One training step: forward, backward data, backward weights; dw and dx left in place.
  bool Step() {
    Device workspace, reserve;
    double loss = 0;
    std::vector<float> dy;
    bool ok =
        Describe() && Forward(true, &workspace, &reserve) && Loss(&loss, &dy) && Upload(dy_, dy) &&
        Ok(cudnnRNNBackwardData_v8(handle_, rnn_, nullptr, y_desc_, y_.pointer, dy_.pointer,
                                   x_desc_, dx_.pointer, h_desc_, hx_.pointer, dhy_.pointer,
                                   dhx_.pointer, h_desc_, cx_.pointer, dcy_.pointer, dcx_.pointer,
                                   weights_.bytes, weights_.pointer, workspace.bytes,
                                   workspace.pointer, reserve.bytes, reserve.pointer),
           "cudnnRNNBackwardData_v8") &&
        Ok(cudaMemset(dweights_.pointer, 0, dweights_.bytes), "cudaMemset") &&
        Ok(cudnnRNNBackwardWeights_v8(handle_, rnn_, CUDNN_WGRAD_MODE_ADD, nullptr, x_desc_,
                                      x_.pointer, h_desc_, hx_.pointer, y_desc_, y_.pointer,
                                      dweights_.bytes, dweights_.pointer, workspace.bytes,
                                      workspace.pointer, reserve.bytes, reserve.pointer),
           "cudnnRNNBackwardWeights_v8") &&
        Release();
    cudaFree(workspace.pointer);
    cudaFree(reserve.pointer);
    last_loss_ = loss;
    return ok;
  }

  bool Update() {
    std::vector<float> dw(weights_host_.size());
    if (!Download(&dw, dweights_)) return false;
    for (size_t i = 0; i < dw.size(); ++i) weights_host_[i] -= kLearningRate * dw[i];
    return Upload(weights_, weights_host_);
  }

  // The loss of an inference forward with the weights and x offset by eps times v and u.
  bool LossAt(const std::vector<float>& v, const std::vector<float>& u, float eps, double* loss) {
    std::vector<float> w = weights_host_, x = x_host_;
    for (size_t i = 0; i < w.size(); ++i) w[i] += eps * v[i];
    for (size_t i = 0; i < x.size(); ++i) x[i] += eps * u[i];
    Device workspace, reserve;
    const bool ok = Upload(weights_, w) && Upload(x_, x) && Describe() &&
                    Forward(false, &workspace, &reserve) && Loss(loss, nullptr) && Release();
    cudaFree(workspace.pointer);
    cudaFree(reserve.pointer);
    return ok && Upload(weights_, weights_host_) && Upload(x_, x_host_);
  }

  bool GradCheck() {
    if (!Step()) return false;
    std::vector<float> dw(weights_host_.size()), dx(x_host_.size());
    if (!Download(&dw, dweights_) || !Download(&dx, dx_)) return false;
    const std::vector<float> v = Values(dw.size(), 23, 1.0f), u = Values(dx.size(), 29, 1.0f);
    const std::vector<float> none_w(dw.size(), 0.0f), none_x(dx.size(), 0.0f);
    constexpr float kEps = 5e-3f;
    double analytic_w = 0, analytic_x = 0, plus = 0, minus = 0;
    for (size_t i = 0; i < dw.size(); ++i) analytic_w += static_cast<double>(dw[i]) * v[i];
    for (size_t i = 0; i < dx.size(); ++i) analytic_x += static_cast<double>(dx[i]) * u[i];
    if (!LossAt(v, none_x, kEps, &plus) || !LossAt(v, none_x, -kEps, &minus)) return false;
    std::printf("gradcheck w %.6g %.6g\n", analytic_w, (plus - minus) / (2 * kEps));
    if (!LossAt(none_w, u, kEps, &plus) || !LossAt(none_w, u, -kEps, &minus)) return false;
    std::printf("gradcheck x %.6g %.6g\n", analytic_x, (plus - minus) / (2 * kEps));
    return true;
  }

  bool Finish() {
    std::vector<float> y(target_.size());
    if (!Download(&y, y_)) return false;
    std::vector<float> all = y;
    all.insert(all.end(), weights_host_.begin(), weights_host_.end());
    std::printf("loss %.6f\n", last_loss_);
    std::printf("checksum %016llx\n", static_cast<unsigned long long>(ndt::programs::Fnv1a64(
                                          all.data(), all.size() * sizeof(float))));
    return true;
  }

 private:
  Options o_;
  cudnnHandle_t handle_ = nullptr;
  cudnnDropoutDescriptor_t dropout_ = nullptr;
  cudnnRNNDescriptor_t rnn_ = nullptr;
  cudnnRNNDataDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnTensorDescriptor_t h_desc_ = nullptr;
  Device states_, weights_, dweights_, x_, dx_, y_, dy_, hx_, cx_, hy_, cy_, dhy_, dcy_, dhx_, dcx_;
  std::vector<float> weights_host_, x_host_, target_, hx_host_, cx_host_;
  double last_loss_ = 0;
};

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--gradcheck") {
      o->gradcheck = true;
    } else if (arg == "--mode" && has_value) {
      const std::string mode = argv[++i];
      if (mode == "lstm")
        o->mode = CUDNN_LSTM;
      else if (mode == "gru")
        o->mode = CUDNN_GRU;
      else if (mode == "rnn_tanh")
        o->mode = CUDNN_RNN_TANH;
      else if (mode == "rnn_relu")
        o->mode = CUDNN_RNN_RELU;
      else
        return false;
    } else if (arg == "--algo" && has_value) {
      const std::string algo = argv[++i];
      if (algo == "standard")
        o->algo = CUDNN_RNN_ALGO_STANDARD;
      else if (algo == "persist_static")
        o->algo = CUDNN_RNN_ALGO_PERSIST_STATIC;
      else if (algo == "persist_dynamic")
        o->algo = CUDNN_RNN_ALGO_PERSIST_DYNAMIC;
      else if (algo == "persist_static_small_h")
        o->algo = CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
      else
        return false;
    } else if (arg == "--layers" && has_value) {
      o->layers = std::atoi(argv[++i]);
    } else if (arg == "--dropout" && has_value) {
      o->dropout = static_cast<float>(std::atof(argv[++i]));
    } else if (arg == "--seed" && has_value) {
      o->seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--steps" && has_value) {
      o->steps = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  return o->layers > 0 && o->steps > 0 && o->dropout >= 0 && o->dropout < 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!Parse(argc, argv, &options)) {
    std::fprintf(stderr,
                 "usage: lstm_train [--mode lstm|gru|rnn_tanh|rnn_relu] [--algo standard|"
                 "persist_static|persist_dynamic|persist_static_small_h] [--layers L] "
                 "[--dropout P] [--seed S] [--steps K] [--gradcheck]\n");
    return 2;
  }
  if (options.gradcheck) {
    options.dropout = 0;
    options.steps = 1;
  }
  Network network(options);
  if (!network.Init()) return 1;
  std::printf("algo %s\n", AlgoName(options.algo));
  if (options.gradcheck) return network.GradCheck() ? 0 : 1;
  for (int step = 0; step < options.steps; ++step) {
    if (!network.Step() || !network.Update()) return 1;
  }
  return network.Finish() ? 0 : 1;
}
