// The stand-in cuDNN's tensor operations besides convolutions (cuDNN 9's cudnn_ops sublibrary:
// what a CNN written on the legacy API calls around its convolutions): activation, pooling,
// softmax and batch normalization, forward and backward, and cudnnAddTensor, on 4-d float
// tensors of any strides, computed on the host after the handle's stream is synchronised
// (standin_cudnn_internal.h).
// Every routine is deterministic except cudnnPoolingBackward with CUDNN_POOLING_MAX, which the
// cuDNN documentation lists as not reproducible: each window's gradient is added at its
// maximum's position with atomic additions from racing threads, so where windows overlap
// (stride < window) the sums' order, and their last bits, vary from run to run;
// CUDNN_POOLING_MAX_DETERMINISTIC adds them in a fixed order.
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "standin_atomic.h"
#include "standin_cudnn_internal.h"

struct cudnnActivationStruct {
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  double coef = 0;
};

struct cudnnPoolingStruct {
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  int window[2] = {1, 1};
  int pad[2] = {0, 0};
  int stride[2] = {1, 1};
};

namespace {

using ndt::standin::AtomicAddFloat;
using ndt::standin::RunRacing;
using ndt::standin::SynchronizeHandle;

constexpr int kRacingThreads = 4;

// A set 4-d float tensor, read through its strides.
struct View {
  int n = 0, c = 0, h = 0, w = 0;
  int stride[4] = {0, 0, 0, 0};
  size_t Index(int in, int ic, int ih, int iw) const {
    return static_cast<size_t>(in) * stride[0] + static_cast<size_t>(ic) * stride[1] +
           static_cast<size_t>(ih) * stride[2] + static_cast<size_t>(iw) * stride[3];
  }
  int64_t Count() const { return int64_t{n} * c * h * w; }
  bool SameShape(const View& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
};

bool ViewOf(cudnnTensorDescriptor_t desc, View* view) {
  if (desc == nullptr || !desc->set || desc->nb_dims != 4 || desc->dtype != CUDNN_DATA_FLOAT) {
    return false;
  }
  view->n = desc->dims[0];
  view->c = desc->dims[1];
  view->h = desc->dims[2];
  view->w = desc->dims[3];
  std::copy(desc->strides, desc->strides + 4, view->stride);
  return true;
}

float Scale(const void* value) {
  float scale = 0;
  if (value != nullptr) std::memcpy(&scale, value, sizeof scale);
  return scale;
}

// out = alpha * value + beta * out (out not read when beta is 0).
void Blend(float alpha, float beta, float value, float* out) {
  *out = beta == 0 ? alpha * value : alpha * value + beta * *out;
}

// Visits every element of `v` as (flat dense index, n, c, h, w).
template <typename F>
void ForEach(const View& v, F f) {
  int64_t dense = 0;
  for (int in = 0; in < v.n; ++in)
    for (int ic = 0; ic < v.c; ++ic)
      for (int ih = 0; ih < v.h; ++ih)
        for (int iw = 0; iw < v.w; ++iw) f(dense++, in, ic, ih, iw);
}

// The handle synchronised, and views of tensors that must all be set 4-d float tensors.
cudnnStatus_t Prepare(cudnnHandle_t handle,
                      std::initializer_list<std::pair<cudnnTensorDescriptor_t, View*>> tensors) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  for (const auto& [desc, view] : tensors) {
    if (desc == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
    if (!ViewOf(desc, view)) return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return SynchronizeHandle(handle);
}

// One tensor argument of a backward call: its descriptor, its data and the view to fill.
struct Operand {
  cudnnTensorDescriptor_t desc;
  const void* data;
  View* view;
};

// A backward call's y, dy, x and dx (activation, pooling): none may be null; views of them after
// the handle's stream is synchronised.
cudnnStatus_t PrepareBackward(cudnnHandle_t handle, const void* desc, Operand y, Operand dy,
                              Operand x, Operand dx) {
  if (desc == nullptr || y.data == nullptr || dy.data == nullptr || x.data == nullptr ||
      dx.data == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return Prepare(handle,
                 {{y.desc, y.view}, {dy.desc, dy.view}, {x.desc, x.view}, {dx.desc, dx.view}});
}

float Activate(const cudnnActivationStruct& a, float x) {
  switch (a.mode) {
    case CUDNN_ACTIVATION_SIGMOID:
      return 1.0f / (1.0f + std::exp(-x));
    case CUDNN_ACTIVATION_RELU:
      return x > 0 ? x : 0.0f;
    case CUDNN_ACTIVATION_TANH:
      return std::tanh(x);
    case CUDNN_ACTIVATION_CLIPPED_RELU:
      return std::min(std::max(x, 0.0f), static_cast<float>(a.coef));
    case CUDNN_ACTIVATION_ELU:
      return x > 0 ? x : static_cast<float>(a.coef) * (std::exp(x) - 1.0f);
    default:  // CUDNN_ACTIVATION_IDENTITY
      return x;
  }
}

// d activation / dx at x, given y = Activate(x).
float Slope(const cudnnActivationStruct& a, float x, float y) {
  switch (a.mode) {
    case CUDNN_ACTIVATION_SIGMOID:
      return y * (1.0f - y);
    case CUDNN_ACTIVATION_RELU:
      return x > 0 ? 1.0f : 0.0f;
    case CUDNN_ACTIVATION_TANH:
      return 1.0f - y * y;
    case CUDNN_ACTIVATION_CLIPPED_RELU:
      return x > 0 && x < static_cast<float>(a.coef) ? 1.0f : 0.0f;
    case CUDNN_ACTIVATION_ELU:
      return x > 0 ? 1.0f : y + static_cast<float>(a.coef);
    default:
      return 1.0f;
  }
}

bool KnownActivation(cudnnActivationMode_t mode) {
  return mode == CUDNN_ACTIVATION_SIGMOID || mode == CUDNN_ACTIVATION_RELU ||
         mode == CUDNN_ACTIVATION_TANH || mode == CUDNN_ACTIVATION_CLIPPED_RELU ||
         mode == CUDNN_ACTIVATION_ELU || mode == CUDNN_ACTIVATION_IDENTITY;
}

int PooledSize(int in, int window, int pad, int stride) {
  return 1 + (in + 2 * pad - window) / stride;
}

bool IsMax(cudnnPoolingMode_t mode) {
  return mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC;
}

// The input rows and columns of output (oh, ow)'s window, clipped to the tensor; `count` the
// divisor of an average (the whole window with padding included, else the clipped part).
struct Window {
  int h0, h1, w0, w1, count;
};

Window WindowOf(const cudnnPoolingStruct& p, const View& x, int oh, int ow) {
  const int top = oh * p.stride[0] - p.pad[0], left = ow * p.stride[1] - p.pad[1];
  Window win{std::max(top, 0), std::min(top + p.window[0], x.h), std::max(left, 0),
             std::min(left + p.window[1], x.w), 0};
  win.count = p.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                  ? p.window[0] * p.window[1]
                  : std::max((win.h1 - win.h0) * (win.w1 - win.w0), 1);
  return win;
}

// The first position of the window's largest x (the one the forward pass took).
std::pair<int, int> ArgMax(const View& xv, const float* x, int in, int ic, const Window& win) {
  float best = -std::numeric_limits<float>::infinity();
  std::pair<int, int> at{win.h0, win.w0};
  for (int ih = win.h0; ih < win.h1; ++ih)
    for (int iw = win.w0; iw < win.w1; ++iw) {
      const float v = x[xv.Index(in, ic, ih, iw)];
      if (v > best) {
        best = v;
        at = {ih, iw};
      }
    }
  return at;
}

// Softmax over the channels of each (n, h, w) (CUDNN_SOFTMAX_MODE_CHANNEL) or over all of each
// n's c, h, w (INSTANCE): `group` is called with the indices of each group's elements.
template <typename F>
void ForEachGroup(cudnnSoftmaxMode_t mode, const View& v, F group) {
  std::vector<size_t> members;
  if (mode == CUDNN_SOFTMAX_MODE_INSTANCE) {
    for (int in = 0; in < v.n; ++in) {
      members.clear();
      for (int ic = 0; ic < v.c; ++ic)
        for (int ih = 0; ih < v.h; ++ih)
          for (int iw = 0; iw < v.w; ++iw) members.push_back(v.Index(in, ic, ih, iw));
      group(members);
    }
    return;
  }
  for (int in = 0; in < v.n; ++in)
    for (int ih = 0; ih < v.h; ++ih)
      for (int iw = 0; iw < v.w; ++iw) {
        members.clear();
        for (int ic = 0; ic < v.c; ++ic) members.push_back(v.Index(in, ic, ih, iw));
        group(members);
      }
}

// ---- batch normalization ---------------------------------------------------------------------

// The groups a batch norm normalises over: one per channel (spatial modes: over N, H, W), or one
// per (c, h, w) activation (CUDNN_BATCHNORM_PER_ACTIVATION: over N). `Members(g)` lists the
// elements of group g of `x` by (n, c, h, w).
struct BnGroups {
  bool spatial = true;
  View x;
  int Count() const { return spatial ? x.c : x.c * x.h * x.w; }
  int64_t Size() const { return spatial ? int64_t{x.n} * x.h * x.w : x.n; }
  template <typename F>
  void Members(int g, F f) const {
    if (spatial) {
      for (int in = 0; in < x.n; ++in)
        for (int ih = 0; ih < x.h; ++ih)
          for (int iw = 0; iw < x.w; ++iw) f(in, g, ih, iw);
      return;
    }
    const int ic = g / (x.h * x.w), ih = g / x.w % x.h, iw = g % x.w;
    for (int in = 0; in < x.n; ++in) f(in, ic, ih, iw);
  }
};

bool BnModeKnown(cudnnBatchNormMode_t mode) {
  return mode == CUDNN_BATCHNORM_PER_ACTIVATION || mode == CUDNN_BATCHNORM_SPATIAL ||
         mode == CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
}

// Checks a batch norm's parameter descriptor (1xCx1x1 spatial, 1xCxHxW per activation, float,
// packed) against x.
bool BnParamsFit(cudnnTensorDescriptor_t desc, const BnGroups& groups) {
  View p;
  if (!ViewOf(desc, &p)) return false;
  return p.n == 1 && p.c == groups.x.c &&
         (groups.spatial ? p.h == 1 && p.w == 1 : p.h == groups.x.h && p.w == groups.x.w);
}

// Per group: the mean and 1 / sqrt(variance + epsilon) of x (the biased variance, as batch norm
// normalises with), and the unbiased variance for the running average.
struct BnStats {
  std::vector<float> mean, inv_std, unbiased;
};

BnStats StatsOf(const BnGroups& groups, const float* x, double epsilon) {
  BnStats stats;
  const int count = groups.Count();
  const double m = static_cast<double>(groups.Size());
  stats.mean.resize(count);
  stats.inv_std.resize(count);
  stats.unbiased.resize(count);
  for (int g = 0; g < count; ++g) {
    double sum = 0;
    groups.Members(g, [&](int n, int c, int h, int w) { sum += x[groups.x.Index(n, c, h, w)]; });
    const double mean = sum / m;
    double squares = 0;
    groups.Members(g, [&](int n, int c, int h, int w) {
      const double d = x[groups.x.Index(n, c, h, w)] - mean;
      squares += d * d;
    });
    stats.mean[g] = static_cast<float>(mean);
    stats.inv_std[g] = static_cast<float>(1.0 / std::sqrt(squares / m + epsilon));
    stats.unbiased[g] = static_cast<float>(m > 1 ? squares / (m - 1) : 0.0);
  }
  return stats;
}

// y = alpha (scale (x - mean) inv_std + bias) + beta y.
void Normalize(const BnGroups& groups, const View& yv, float alpha, float beta, const float* x,
               float* y, const float* scale, const float* bias, const float* mean,
               const float* inv_std) {
  for (int g = 0; g < groups.Count(); ++g) {
    groups.Members(g, [&](int n, int c, int h, int w) {
      const float value =
          scale[g] * (x[groups.x.Index(n, c, h, w)] - mean[g]) * inv_std[g] + bias[g];
      Blend(alpha, beta, value, &y[yv.Index(n, c, h, w)]);
    });
  }
}

// The training forward pass: batch statistics, running averages, saved statistics.
cudnnStatus_t BnForwardTraining(cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha,
                                const void* beta, cudnnTensorDescriptor_t x_desc, const void* x,
                                cudnnTensorDescriptor_t y_desc, void* y,
                                cudnnTensorDescriptor_t param_desc, const void* scale,
                                const void* bias, double factor, void* running_mean,
                                void* running_var, double epsilon, void* save_mean,
                                void* save_inv_var) {
  BnGroups groups;
  View yv;
  if (!BnModeKnown(mode) || x == nullptr || y == nullptr || scale == nullptr || bias == nullptr ||
      epsilon < CUDNN_BN_MIN_EPSILON || (running_mean == nullptr) != (running_var == nullptr) ||
      (save_mean == nullptr) != (save_inv_var == nullptr)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  groups.spatial = mode != CUDNN_BATCHNORM_PER_ACTIVATION;
  if (const cudnnStatus_t s = Prepare(handle, {{x_desc, &groups.x}, {y_desc, &yv}});
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  if (!groups.x.SameShape(yv) || !BnParamsFit(param_desc, groups)) return CUDNN_STATUS_BAD_PARAM;
  const BnStats stats = StatsOf(groups, static_cast<const float*>(x), epsilon);
  Normalize(groups, yv, Scale(alpha), Scale(beta), static_cast<const float*>(x),
            static_cast<float*>(y), static_cast<const float*>(scale),
            static_cast<const float*>(bias), stats.mean.data(), stats.inv_std.data());
  const auto f = static_cast<float>(factor);
  for (int g = 0; g < groups.Count(); ++g) {
    if (running_mean != nullptr) {
      auto* rm = static_cast<float*>(running_mean);
      auto* rv = static_cast<float*>(running_var);
      rm[g] = (1.0f - f) * rm[g] + f * stats.mean[g];
      rv[g] = (1.0f - f) * rv[g] + f * stats.unbiased[g];
    }
    if (save_mean != nullptr) {
      static_cast<float*>(save_mean)[g] = stats.mean[g];
      static_cast<float*>(save_inv_var)[g] = stats.inv_std[g];
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

// The backward pass: dx (blended by the data factors), dscale and dbias (by the parameter
// factors), from the saved statistics or, without them, statistics computed again.
cudnnStatus_t BnBackward(cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha_data,
                         const void* beta_data, const void* alpha_param, const void* beta_param,
                         cudnnTensorDescriptor_t x_desc, const void* x,
                         cudnnTensorDescriptor_t dy_desc, const void* dy,
                         cudnnTensorDescriptor_t dx_desc, void* dx,
                         cudnnTensorDescriptor_t param_desc, const void* scale, void* dscale,
                         void* dbias, double epsilon, const void* saved_mean,
                         const void* saved_inv_var) {
  BnGroups groups;
  View dyv, dxv;
  if (!BnModeKnown(mode) || x == nullptr || dy == nullptr || dx == nullptr || scale == nullptr ||
      dscale == nullptr || dbias == nullptr || epsilon < CUDNN_BN_MIN_EPSILON ||
      (saved_mean == nullptr) != (saved_inv_var == nullptr)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  groups.spatial = mode != CUDNN_BATCHNORM_PER_ACTIVATION;
  if (const cudnnStatus_t s =
          Prepare(handle, {{x_desc, &groups.x}, {dy_desc, &dyv}, {dx_desc, &dxv}});
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  if (!groups.x.SameShape(dyv) || !groups.x.SameShape(dxv) || !BnParamsFit(param_desc, groups)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const auto* xs = static_cast<const float*>(x);
  const auto* dys = static_cast<const float*>(dy);
  const auto* gamma = static_cast<const float*>(scale);
  BnStats stats;
  if (saved_mean != nullptr) {
    const auto* mean = static_cast<const float*>(saved_mean);
    const auto* inv = static_cast<const float*>(saved_inv_var);
    stats.mean.assign(mean, mean + groups.Count());
    stats.inv_std.assign(inv, inv + groups.Count());
  } else {
    stats = StatsOf(groups, xs, epsilon);
  }
  const float ad = Scale(alpha_data), bd = Scale(beta_data), ap = Scale(alpha_param),
              bp = Scale(beta_param);
  const auto m = static_cast<float>(groups.Size());
  for (int g = 0; g < groups.Count(); ++g) {
    float sum_dy = 0, sum_dy_xhat = 0;
    groups.Members(g, [&](int n, int c, int h, int w) {
      const float xhat = (xs[groups.x.Index(n, c, h, w)] - stats.mean[g]) * stats.inv_std[g];
      sum_dy += dys[dyv.Index(n, c, h, w)];
      sum_dy_xhat += dys[dyv.Index(n, c, h, w)] * xhat;
    });
    groups.Members(g, [&](int n, int c, int h, int w) {
      const float xhat = (xs[groups.x.Index(n, c, h, w)] - stats.mean[g]) * stats.inv_std[g];
      const float value = gamma[g] * stats.inv_std[g] / m *
                          (m * dys[dyv.Index(n, c, h, w)] - sum_dy - xhat * sum_dy_xhat);
      Blend(ad, bd, value, &static_cast<float*>(dx)[dxv.Index(n, c, h, w)]);
    });
    Blend(ap, bp, sum_dy_xhat, &static_cast<float*>(dscale)[g]);
    Blend(ap, bp, sum_dy, &static_cast<float*>(dbias)[g]);
  }
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new (std::nothrow) cudnnActivationStruct();
  return *desc == nullptr ? CUDNN_STATUS_ALLOC_FAILED : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t desc,
                                           cudnnActivationMode_t mode, cudnnNanPropagation_t nan,
                                           double coef) {
  if (desc == nullptr || !KnownActivation(mode)) return CUDNN_STATUS_BAD_PARAM;
  *desc = cudnnActivationStruct{mode, nan, coef};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t desc,
                                           cudnnActivationMode_t* mode, cudnnNanPropagation_t* nan,
                                           double* coef) {
  if (desc == nullptr || mode == nullptr || nan == nullptr || coef == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *mode = desc->mode;
  *nan = desc->nan;
  *coef = desc->coef;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new (std::nothrow) cudnnPoolingStruct();
  return *desc == nullptr ? CUDNN_STATUS_ALLOC_FAILED : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t desc, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t nan, int window_h, int window_w,
                                          int pad_h, int pad_w, int stride_h, int stride_w) {
  if (desc == nullptr || mode < CUDNN_POOLING_MAX || mode > CUDNN_POOLING_MAX_DETERMINISTIC ||
      window_h <= 0 || window_w <= 0 || pad_h < 0 || pad_w < 0 || stride_h <= 0 || stride_w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *desc = cudnnPoolingStruct{mode, nan, {window_h, window_w}, {pad_h, pad_w}, {stride_h, stride_w}};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPooling2dDescriptor(const cudnnPoolingDescriptor_t desc,
                                          cudnnPoolingMode_t* mode, cudnnNanPropagation_t* nan,
                                          int* window_h, int* window_w, int* pad_h, int* pad_w,
                                          int* stride_h, int* stride_w) {
  if (desc == nullptr || mode == nullptr || nan == nullptr || window_h == nullptr ||
      window_w == nullptr || pad_h == nullptr || pad_w == nullptr || stride_h == nullptr ||
      stride_w == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *mode = desc->mode;
  *nan = desc->nan;
  *window_h = desc->window[0];
  *window_w = desc->window[1];
  *pad_h = desc->pad[0];
  *pad_w = desc->pad[1];
  *stride_h = desc->stride[0];
  *stride_w = desc->stride[1];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t desc,
                                                const cudnnTensorDescriptor_t input, int* n, int* c,
                                                int* h, int* w) {
  View x;
  if (desc == nullptr || n == nullptr || c == nullptr || h == nullptr || w == nullptr ||
      input == nullptr || !input->set || input->nb_dims != 4) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  x.h = input->dims[2];
  x.w = input->dims[3];
  if (x.h + 2 * desc->pad[0] < desc->window[0] || x.w + 2 * desc->pad[1] < desc->window[1]) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *n = input->dims[0];
  *c = input->dims[1];
  *h = PooledSize(x.h, desc->window[0], desc->pad[0], desc->stride[0]);
  *w = PooledSize(x.w, desc->window[1], desc->pad[1], desc->stride[1]);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

// y = alpha f(x) + beta y.
cudnnStatus_t cudnnActivationForward(cudnnHandle_t handle, cudnnActivationDescriptor_t desc,
                                     const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                     const void* x, const void* beta,
                                     const cudnnTensorDescriptor_t y_desc, void* y) {
  View xv, yv;
  if (desc == nullptr || x == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = Prepare(handle, {{x_desc, &xv}, {y_desc, &yv}});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (!xv.SameShape(yv)) return CUDNN_STATUS_BAD_PARAM;
  const float a = Scale(alpha), b = Scale(beta);
  const auto* in = static_cast<const float*>(x);
  auto* out = static_cast<float*>(y);
  ForEach(xv, [&](int64_t, int n, int c, int h, int w) {
    Blend(a, b, Activate(*desc, in[xv.Index(n, c, h, w)]), &out[yv.Index(n, c, h, w)]);
  });
  return CUDNN_STATUS_SUCCESS;
}

// dx = alpha f'(x) dy + beta dx.
cudnnStatus_t cudnnActivationBackward(cudnnHandle_t handle, cudnnActivationDescriptor_t desc,
                                      const void* alpha, const cudnnTensorDescriptor_t y_desc,
                                      const void* y, const cudnnTensorDescriptor_t dy_desc,
                                      const void* dy, const cudnnTensorDescriptor_t x_desc,
                                      const void* x, const void* beta,
                                      const cudnnTensorDescriptor_t dx_desc, void* dx) {
  View yv, dyv, xv, dxv;
  if (const cudnnStatus_t s = PrepareBackward(handle, desc, {y_desc, y, &yv}, {dy_desc, dy, &dyv},
                                              {x_desc, x, &xv}, {dx_desc, dx, &dxv});
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  if (!xv.SameShape(yv) || !xv.SameShape(dyv) || !xv.SameShape(dxv)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const float a = Scale(alpha), b = Scale(beta);
  const auto *ys = static_cast<const float*>(y), *dys = static_cast<const float*>(dy),
             *xs = static_cast<const float*>(x);
  auto* out = static_cast<float*>(dx);
  ForEach(xv, [&](int64_t, int n, int c, int h, int w) {
    const float slope = Slope(*desc, xs[xv.Index(n, c, h, w)], ys[yv.Index(n, c, h, w)]);
    Blend(a, b, slope * dys[dyv.Index(n, c, h, w)], &out[dxv.Index(n, c, h, w)]);
  });
  return CUDNN_STATUS_SUCCESS;
}

// y = alpha pool(x) + beta y.
cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t desc,
                                  const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                  const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t y_desc, void* y) {
  View xv, yv;
  if (desc == nullptr || x == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = Prepare(handle, {{x_desc, &xv}, {y_desc, &yv}});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (yv.n != xv.n || yv.c != xv.c ||
      yv.h != PooledSize(xv.h, desc->window[0], desc->pad[0], desc->stride[0]) ||
      yv.w != PooledSize(xv.w, desc->window[1], desc->pad[1], desc->stride[1])) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const float a = Scale(alpha), b = Scale(beta);
  const auto* in = static_cast<const float*>(x);
  auto* out = static_cast<float*>(y);
  ForEach(yv, [&](int64_t, int n, int c, int oh, int ow) {
    const Window win = WindowOf(*desc, xv, oh, ow);
    float value = 0;
    if (IsMax(desc->mode)) {
      const auto [ih, iw] = ArgMax(xv, in, n, c, win);
      value = in[xv.Index(n, c, ih, iw)];
    } else {
      for (int ih = win.h0; ih < win.h1; ++ih)
        for (int iw = win.w0; iw < win.w1; ++iw) value += in[xv.Index(n, c, ih, iw)];
      value /= static_cast<float>(win.count);
    }
    Blend(a, b, value, &out[yv.Index(n, c, oh, ow)]);
  });
  return CUDNN_STATUS_SUCCESS;
}

// dx = alpha pool'(dy) + beta dx: each window's gradient to its maximum (max modes) or spread
// over it (average modes).
cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t desc,
                                   const void* alpha, const cudnnTensorDescriptor_t y_desc,
                                   const void* y, const cudnnTensorDescriptor_t dy_desc,
                                   const void* dy, const cudnnTensorDescriptor_t x_desc,
                                   const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dx_desc, void* dx) {
  View yv, dyv, xv, dxv;
  if (const cudnnStatus_t s = PrepareBackward(handle, desc, {y_desc, y, &yv}, {dy_desc, dy, &dyv},
                                              {x_desc, x, &xv}, {dx_desc, dx, &dxv});
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  if (!yv.SameShape(dyv) || !xv.SameShape(dxv)) return CUDNN_STATUS_BAD_PARAM;
  const auto *xs = static_cast<const float*>(x), *dys = static_cast<const float*>(dy);
  std::vector<float> sums;
  try {
    sums.assign(static_cast<size_t>(xv.Count()), 0.0f);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
  const auto dense = [&xv](int n, int c, int h, int w) {
    return ((static_cast<size_t>(n) * xv.c + c) * xv.h + h) * xv.w + w;
  };
  // One output's gradient, added with `add(cell, value)`.
  const auto route = [&](int n, int c, int oh, int ow, const auto& add) {
    const Window win = WindowOf(*desc, xv, oh, ow);
    const float g = dys[dyv.Index(n, c, oh, ow)];
    if (IsMax(desc->mode)) {
      const auto [ih, iw] = ArgMax(xv, xs, n, c, win);
      add(&sums[dense(n, c, ih, iw)], g);
      return;
    }
    for (int ih = win.h0; ih < win.h1; ++ih)
      for (int iw = win.w0; iw < win.w1; ++iw) {
        add(&sums[dense(n, c, ih, iw)], g / static_cast<float>(win.count));
      }
  };
  if (desc->mode == CUDNN_POOLING_MAX) {
    const int64_t outputs = dyv.Count();
    RunRacing(kRacingThreads, [&](int thread, int threads, const std::function<void()>& yield) {
      // Neighbouring windows on different threads, as neighbouring GPU threads take them.
      for (int64_t o = thread; o < outputs; o += threads) {
        const int ow = static_cast<int>(o % dyv.w);
        const int oh = static_cast<int>(o / dyv.w % dyv.h);
        const int c = static_cast<int>(o / (int64_t{dyv.w} * dyv.h) % dyv.c);
        const int n = static_cast<int>(o / (int64_t{dyv.w} * dyv.h * dyv.c));
        route(n, c, oh, ow, [](float* cell, float v) { AtomicAddFloat(cell, v); });
        yield();
      }
    });
  } else {
    ForEach(dyv, [&](int64_t, int n, int c, int oh, int ow) {
      route(n, c, oh, ow, [](float* cell, float v) { *cell += v; });
    });
  }
  const float a = Scale(alpha), b = Scale(beta);
  auto* out = static_cast<float*>(dx);
  ForEach(xv, [&](int64_t i, int n, int c, int h, int w) {
    Blend(a, b, sums[static_cast<size_t>(i)], &out[dxv.Index(n, c, h, w)]);
  });
  return CUDNN_STATUS_SUCCESS;
}

// y = alpha softmax(x) + beta y (LOG: the log of the softmax).
cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                  cudnnSoftmaxMode_t mode, const void* alpha,
                                  const cudnnTensorDescriptor_t x_desc, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t y_desc, void* y) {
  View xv, yv;
  if (x == nullptr || y == nullptr || algo > CUDNN_SOFTMAX_LOG) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = Prepare(handle, {{x_desc, &xv}, {y_desc, &yv}});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  if (!xv.SameShape(yv) || xv.stride[0] != yv.stride[0] || xv.stride[1] != yv.stride[1] ||
      xv.stride[2] != yv.stride[2] || xv.stride[3] != yv.stride[3]) {
    return CUDNN_STATUS_NOT_SUPPORTED;  // the same layout in and out, as the stand-in indexes
  }
  const float a = Scale(alpha), b = Scale(beta);
  const auto* in = static_cast<const float*>(x);
  auto* out = static_cast<float*>(y);
  ForEachGroup(mode, xv, [&](const std::vector<size_t>& group) {
    float top = algo == CUDNN_SOFTMAX_FAST ? 0.0f : -std::numeric_limits<float>::infinity();
    if (algo != CUDNN_SOFTMAX_FAST) {
      for (size_t i : group) top = std::max(top, in[i]);
    }
    float sum = 0;
    for (size_t i : group) sum += std::exp(in[i] - top);
    for (size_t i : group) {
      const float value =
          algo == CUDNN_SOFTMAX_LOG ? in[i] - top - std::log(sum) : std::exp(in[i] - top) / sum;
      Blend(a, b, value, &out[i]);
    }
  });
  return CUDNN_STATUS_SUCCESS;
}

// dx = alpha softmax'(y, dy) + beta dx.
cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                   cudnnSoftmaxMode_t mode, const void* alpha,
                                   const cudnnTensorDescriptor_t y_desc, const void* y,
                                   const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                   const void* beta, const cudnnTensorDescriptor_t dx_desc,
                                   void* dx) {
  View yv, dyv, dxv;
  if (y == nullptr || dy == nullptr || dx == nullptr || algo > CUDNN_SOFTMAX_LOG) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (const cudnnStatus_t s = Prepare(handle, {{y_desc, &yv}, {dy_desc, &dyv}, {dx_desc, &dxv}});
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  for (const View* v : {&dyv, &dxv}) {
    if (!yv.SameShape(*v) || !std::equal(yv.stride, yv.stride + 4, v->stride)) {
      return CUDNN_STATUS_NOT_SUPPORTED;
    }
  }
  const float a = Scale(alpha), b = Scale(beta);
  const auto *ys = static_cast<const float*>(y), *dys = static_cast<const float*>(dy);
  auto* out = static_cast<float*>(dx);
  ForEachGroup(mode, yv, [&](const std::vector<size_t>& group) {
    float sum = 0;
    for (size_t i : group) sum += algo == CUDNN_SOFTMAX_LOG ? dys[i] : dys[i] * ys[i];
    for (size_t i : group) {
      const float value =
          algo == CUDNN_SOFTMAX_LOG ? dys[i] - std::exp(ys[i]) * sum : ys[i] * (dys[i] - sum);
      Blend(a, b, value, &out[i]);
    }
  });
  return CUDNN_STATUS_SUCCESS;
}

// C = alpha A + beta C, A broadcast along its dimensions of size 1 (a bias per channel).
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha,
                             const cudnnTensorDescriptor_t a_desc, const void* a, const void* beta,
                             const cudnnTensorDescriptor_t c_desc, void* c) {
  View av, cv;
  if (a == nullptr || c == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t s = Prepare(handle, {{a_desc, &av}, {c_desc, &cv}});
      s != CUDNN_STATUS_SUCCESS)
    return s;
  const int a_dims[4] = {av.n, av.c, av.h, av.w}, c_dims[4] = {cv.n, cv.c, cv.h, cv.w};
  for (int d = 0; d < 4; ++d) {
    if (a_dims[d] != 1 && a_dims[d] != c_dims[d]) return CUDNN_STATUS_BAD_PARAM;
  }
  const float al = Scale(alpha), be = Scale(beta);
  const auto* as = static_cast<const float*>(a);
  auto* cs = static_cast<float*>(c);
  ForEach(cv, [&](int64_t, int n, int ch, int h, int w) {
    const float value =
        as[av.Index(av.n == 1 ? 0 : n, av.c == 1 ? 0 : ch, av.h == 1 ? 0 : h, av.w == 1 ? 0 : w)];
    Blend(al, be, value, &cs[cv.Index(n, ch, h, w)]);
  });
  return CUDNN_STATUS_SUCCESS;
}

// ---- batch normalization ----

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derived,
                                            const cudnnTensorDescriptor_t x_desc,
                                            cudnnBatchNormMode_t mode) {
  if (derived == nullptr || x_desc == nullptr || !x_desc->set || x_desc->nb_dims != 4 ||
      !BnModeKnown(mode)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const bool spatial = mode != CUDNN_BATCHNORM_PER_ACTIVATION;
  const int c = x_desc->dims[1], h = spatial ? 1 : x_desc->dims[2],
            w = spatial ? 1 : x_desc->dims[3];
  derived->dtype = x_desc->dtype == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const int dims[4] = {1, c, h, w}, strides[4] = {c * h * w, h * w, w, 1};
  std::copy(dims, dims + 4, derived->dims);
  std::copy(strides, strides + 4, derived->strides);
  derived->nb_dims = 4;
  derived->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t x_desc, const void* x, const cudnnTensorDescriptor_t y_desc,
    void* y, const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias,
    double factor, void* running_mean, void* running_var, double epsilon, void* save_mean,
    void* save_inv_var) {
  return BnForwardTraining(handle, mode, alpha, beta, x_desc, x, y_desc, y, param_desc, scale, bias,
                           factor, running_mean, running_var, epsilon, save_mean, save_inv_var);
}

// The Ex forms (what PyTorch's cudnn_batch_norm calls) with CUDNN_BATCHNORM_OPS_BN; the fused
// activation and addition: CUDNN_STATUS_NOT_SUPPORTED. No workspace or reserve space is needed.
cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha,
    const void* beta, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t y_desc, void* y,
    const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias, double factor,
    void* running_mean, void* running_var, double epsilon, void* save_mean, void* save_inv_var,
    cudnnActivationDescriptor_t, void*, size_t, void*, size_t) {
  if (ops != CUDNN_BATCHNORM_OPS_BN) return CUDNN_STATUS_NOT_SUPPORTED;
  return BnForwardTraining(handle, mode, alpha, beta, x_desc, x, y_desc, y, param_desc, scale, bias,
                           factor, running_mean, running_var, epsilon, save_mean, save_inv_var);
}

cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t, cudnnBatchNormOps_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnActivationDescriptor_t, size_t* bytes) {
  if (handle == nullptr || bytes == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t, cudnnBatchNormOps_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnActivationDescriptor_t,
    size_t* bytes) {
  if (handle == nullptr || bytes == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t, cudnnBatchNormOps_t,
    const cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t, size_t* bytes) {
  if (handle == nullptr || bytes == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

// y = alpha (scale (x - mean) / sqrt(var + epsilon) + bias) + beta y, with the given estimates.
cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t x_desc, const void* x, const cudnnTensorDescriptor_t y_desc,
    void* y, const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias,
    const void* mean, const void* variance, double epsilon) {
  BnGroups groups;
  View yv;
  if (!BnModeKnown(mode) || x == nullptr || y == nullptr || scale == nullptr || bias == nullptr ||
      mean == nullptr || variance == nullptr || epsilon < CUDNN_BN_MIN_EPSILON) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  groups.spatial = mode != CUDNN_BATCHNORM_PER_ACTIVATION;
  if (const cudnnStatus_t s = Prepare(handle, {{x_desc, &groups.x}, {y_desc, &yv}});
      s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  if (!groups.x.SameShape(yv) || !BnParamsFit(param_desc, groups)) return CUDNN_STATUS_BAD_PARAM;
  std::vector<float> inv_std(groups.Count());
  for (int g = 0; g < groups.Count(); ++g) {
    inv_std[g] =
        static_cast<float>(1.0 / std::sqrt(static_cast<const float*>(variance)[g] + epsilon));
  }
  Normalize(groups, yv, Scale(alpha), Scale(beta), static_cast<const float*>(x),
            static_cast<float*>(y), static_cast<const float*>(scale),
            static_cast<const float*>(bias), static_cast<const float*>(mean), inv_std.data());
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha_data, const void* beta_data,
    const void* alpha_param, const void* beta_param, const cudnnTensorDescriptor_t x_desc,
    const void* x, const cudnnTensorDescriptor_t dy_desc, const void* dy,
    const cudnnTensorDescriptor_t dx_desc, void* dx, const cudnnTensorDescriptor_t param_desc,
    const void* scale, void* dscale, void* dbias, double epsilon, const void* saved_mean,
    const void* saved_inv_var) {
  return BnBackward(handle, mode, alpha_data, beta_data, alpha_param, beta_param, x_desc, x,
                    dy_desc, dy, dx_desc, dx, param_desc, scale, dscale, dbias, epsilon, saved_mean,
                    saved_inv_var);
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const void* alpha_data, const void* beta_data, const void* alpha_param, const void* beta_param,
    const cudnnTensorDescriptor_t x_desc, const void* x, const cudnnTensorDescriptor_t, const void*,
    const cudnnTensorDescriptor_t dy_desc, const void* dy, const cudnnTensorDescriptor_t, void*,
    const cudnnTensorDescriptor_t dx_desc, void* dx, const cudnnTensorDescriptor_t param_desc,
    const void* scale, const void*, void* dscale, void* dbias, double epsilon,
    const void* saved_mean, const void* saved_inv_var, cudnnActivationDescriptor_t, void*, size_t,
    void*, size_t) {
  if (ops != CUDNN_BATCHNORM_OPS_BN) return CUDNN_STATUS_NOT_SUPPORTED;
  return BnBackward(handle, mode, alpha_data, beta_data, alpha_param, beta_param, x_desc, x,
                    dy_desc, dy, dx_desc, dx, param_desc, scale, dscale, dbias, epsilon, saved_mean,
                    saved_inv_var);
}

}  // extern "C"
