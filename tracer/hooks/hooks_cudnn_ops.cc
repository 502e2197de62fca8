// The cuDNN hooks of the tensor operations around convolutions (cuDNN 9's cudnn_ops: what a CNN
// written on the legacy API calls): cudnnActivationForward/Backward, cudnnPoolingForward/Backward,
// cudnnSoftmaxForward/Backward, cudnnAddTensor and batch normalization
// (cudnnBatchNormalizationForwardTraining[Ex], ...ForwardInference, ...Backward[Ex]: PyTorch's
// BatchNorm*d calls the Ex forms) become `other` ops named by the function, with their mode,
// window, epsilon and scaling factors as arguments and digests of exactly the tensors they read
// (before the call; an output too when its beta is not 0, running averages updated in place) and
// write (after it). Tensor descriptors are read back through the real cudnnGetTensor4dDescriptor.
//
// cudnnPoolingBackward also carries the pooling mode as its algorithm: the cuDNN documentation
// ("Reproducibility") lists it with CUDNN_POOLING_MAX among the routines that use atomics and do
// not reproduce across runs (the gradients of overlapping windows meet at one input);
// CUDNN_POOLING_MAX_DETERMINISTIC is its deterministic form. Policy enforce runs the backward
// call with a pooling descriptor of ndtrace's own that differs from the program's in that mode
// only (a PolicyDecisionRecord; the forward pass picks the same maxima in both modes).
#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "formats/records.h"
#include "tracer/cudnn_types.h"
#include "tracer/library_support.h"
#include "tracer/policy.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {

constexpr const char* kCudnn = kCudnnSoname;

// A 4-d tensor descriptor as the real library reports it.
struct Tensor {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::array<int, 4> dims{};
  std::array<int, 4> strides{};
};

std::optional<Tensor> TensorOf(cudnnTensorDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetTensor4dDescriptor);
  Tensor t;
  if (get == nullptr ||
      get(desc, &t.dtype, &t.dims[0], &t.dims[1], &t.dims[2], &t.dims[3], &t.strides[0],
          &t.strides[1], &t.strides[2], &t.strides[3]) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return t;
}

uint64_t Address(const void* pointer) {
  return reinterpret_cast<uint64_t>(pointer);
}

// A tensor argument of a call: its descriptor and data, in the role the call gives it.
struct Operand {
  const char* role;
  cudnnTensorDescriptor_t desc;
  const void* data;
};

Extent ExtentOf(const Operand& o) {
  const std::optional<Tensor> t = TensorOf(o.desc);
  return Extent{o.role, Address(o.data),
                t ? CudnnTensorBytes(t->dtype, t->dims.data(), t->strides.data(), 4) : 0,
                t ? CudnnDType(t->dtype) : format::DType::kUnknown};
}

// A host scaling factor: double for double tensors, float otherwise (cuDNN's rule).
double Scale(const void* value, const Operand& output) {
  if (value == nullptr) return 0;
  const std::optional<Tensor> t = TensorOf(output.desc);
  if (t && t->dtype == CUDNN_DATA_DOUBLE) {
    double scale;
    std::memcpy(&scale, value, sizeof scale);
    return scale;
  }
  float scale;
  std::memcpy(&scale, value, sizeof scale);
  return scale;
}

// A tensor the call writes, and whether it also reads it first (its beta is not 0, or it is a
// running average the call updates).
struct Written {
  Operand operand;
  bool read = false;
};

// One call: `reads` (and the written tensors it reads) digested before it, `writes` after it;
// their pointers and the first written tensor's dims and dtype are arguments, then what `args`
// adds; `real()` runs it. Operands without data (optional ones the program left null) are left
// out.
template <typename Args, typename Real>
cudnnStatus_t RecordCudnnOp(Session& session, RealCall<cudnnStatus_t>& call, const char* name,
                            cudnnHandle_t handle, std::vector<Operand> reads,
                            std::vector<Written> writes, Args args, Real real) {
  std::erase_if(reads, [](const Operand& o) { return o.data == nullptr; });
  std::erase_if(writes, [](const Written& w) { return w.operand.data == nullptr; });
  const uint64_t stream = CudnnHandleStream(handle);
  format::OpRecord op =
      session.BeginOp(format::OpKind::kOther, name, session.StreamId(stream, false));
  std::vector<Extent> inputs, outputs;
  for (const Operand& o : reads) {
    op.args.push_back(PointerArgument(session, o.role, Address(o.data)));
    inputs.push_back(ExtentOf(o));
  }
  for (const Written& w : writes) {
    op.args.push_back(PointerArgument(session, w.operand.role, Address(w.operand.data)));
    outputs.push_back(ExtentOf(w.operand));
    if (w.read) inputs.push_back(outputs.back());
  }
  if (const std::optional<Tensor> t =
          writes.empty() ? std::nullopt : TensorOf(writes[0].operand.desc)) {
    op.args.push_back(DimsArgument(std::string(writes[0].operand.role) + "_dims",
                                   std::vector<int64_t>(t->dims.begin(), t->dims.end())));
    op.args.push_back(TextArgument("dtype", CudnnDTypeText(t->dtype)));
  }
  args(op);
  const auto empty = [](const Extent& e) { return e.bytes == 0; };
  std::erase_if(inputs, empty);
  std::erase_if(outputs, empty);
  op.inputs = DigestExtents(session, stream, inputs);
  const cudnnStatus_t status = call.Run(real);
  if (status == CUDNN_STATUS_SUCCESS && !outputs.empty()) {
    op.outputs = DigestExtents(session, stream, outputs);
  }
  session.EndOp(op, static_cast<int32_t>(status));
  return status;
}

// A call of the form output = alpha op(reads) + beta output: alpha and beta are arguments
// before what `args` adds, and the output is read too when beta is not 0.
template <typename Args, typename Real>
cudnnStatus_t RecordTensorOp(Session& session, RealCall<cudnnStatus_t>& call, const char* name,
                             cudnnHandle_t handle, const void* alpha, const void* beta,
                             std::vector<Operand> reads, const Operand& output, Args args,
                             Real real) {
  const double beta_value = Scale(beta, output);
  return RecordCudnnOp(
      session, call, name, handle, std::move(reads), {{output, beta_value != 0}},
      [&](format::OpRecord& op) {
        op.args.push_back(DoubleArgument("alpha", Scale(alpha, output)));
        op.args.push_back(DoubleArgument("beta", beta_value));
        args(op);
      },
      real);
}

// ---- pooling -------------------------------------------------------------------------------

struct Pooling {
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  std::array<int, 2> window{}, pad{}, stride{};
};

std::optional<Pooling> PoolingOf(cudnnPoolingDescriptor_t desc) {
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetPooling2dDescriptor);
  Pooling p;
  if (desc == nullptr || get == nullptr ||
      get(desc, &p.mode, &p.nan, &p.window[0], &p.window[1], &p.pad[0], &p.pad[1], &p.stride[0],
          &p.stride[1]) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return p;
}

const char* PoolingModeName(cudnnPoolingMode_t mode) {
  switch (mode) {
    case CUDNN_POOLING_MAX:
      return "CUDNN_POOLING_MAX";
    case CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING:
      return "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING";
    case CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING:
      return "CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING";
    case CUDNN_POOLING_MAX_DETERMINISTIC:
      return "CUDNN_POOLING_MAX_DETERMINISTIC";
  }
  return "CUDNN_POOLING_UNKNOWN";
}

void AddPoolingArguments(const std::optional<Pooling>& p, format::OpRecord& op) {
  if (!p) {
    op.args.push_back(TextArgument("mode", "unknown (not a 2-d pooling descriptor)"));
    return;
  }
  op.args.push_back(TextArgument("mode", PoolingModeName(p->mode)));
  op.args.push_back(DimsArgument("window", {p->window[0], p->window[1]}));
  op.args.push_back(DimsArgument("pad", {p->pad[0], p->pad[1]}));
  op.args.push_back(DimsArgument("stride", {p->stride[0], p->stride[1]}));
}

format::AlgorithmChoice PoolingChoice(cudnnPoolingMode_t mode, format::ChoiceSource source) {
  format::AlgorithmChoice choice;
  choice.library = "cudnn";
  choice.id = static_cast<int64_t>(mode);
  choice.name = PoolingModeName(mode);
  choice.determinism = mode == CUDNN_POOLING_MAX ? format::Determinism::kNondeterministic
                                                 : format::Determinism::kDeterministic;
  choice.source = source;
  return choice;
}

// A pooling descriptor of ndtrace's own, destroyed with it.
class OwnPooling {
 public:
  OwnPooling() = default;
  OwnPooling(const OwnPooling&) = delete;
  OwnPooling& operator=(const OwnPooling&) = delete;
  ~OwnPooling() {
    if (desc_ == nullptr) return;
    if (const auto destroy = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyPoolingDescriptor)) {
      destroy(desc_);
    }
  }
  // `p` with `mode`; false when the library refuses.
  bool Make(const Pooling& p, cudnnPoolingMode_t mode) {
    const auto create = NDT_REAL_LIBRARY(kCudnn, cudnnCreatePoolingDescriptor);
    const auto set = NDT_REAL_LIBRARY(kCudnn, cudnnSetPooling2dDescriptor);
    if (create == nullptr || set == nullptr || create(&desc_) != CUDNN_STATUS_SUCCESS) {
      desc_ = nullptr;
      return false;
    }
    return set(desc_, mode, p.nan, p.window[0], p.window[1], p.pad[0], p.pad[1], p.stride[0],
               p.stride[1]) == CUDNN_STATUS_SUCCESS;
  }
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

// The descriptor cudnnPoolingBackward runs with: the program's, or under policy enforce one of
// ndtrace's own with CUDNN_POOLING_MAX_DETERMINISTIC in place of CUDNN_POOLING_MAX.
cudnnPoolingDescriptor_t BackwardPooling(Session& session, format::OpRecord& op,
                                         cudnnPoolingDescriptor_t desc,
                                         const std::optional<Pooling>& p, OwnPooling& own) {
  if (!p) return desc;
  op.algorithm = PoolingChoice(p->mode, format::ChoiceSource::kRequested);
  if (session.policy().mode != PolicyMode::kEnforce || p->mode != CUDNN_POOLING_MAX) return desc;
  format::PolicyDecisionRecord decision;
  decision.op_sequence = op.sequence;
  decision.library = "cudnn";
  decision.from_choice = op.algorithm;
  decision.to_choice =
      PoolingChoice(CUDNN_POOLING_MAX_DETERMINISTIC, format::ChoiceSource::kEnforced);
  if (!own.Make(*p, CUDNN_POOLING_MAX_DETERMINISTIC)) {
    decision.action =
        "cannot replace pooling mode CUDNN_POOLING_MAX (nondeterministic) in "
        "cudnnPoolingBackward: the library refused a CUDNN_POOLING_MAX_DETERMINISTIC descriptor";
    decision.applied = false;
    session.Decide(decision);
    return desc;
  }
  decision.action =
      "replaced pooling mode CUDNN_POOLING_MAX (nondeterministic) by "
      "CUDNN_POOLING_MAX_DETERMINISTIC in cudnnPoolingBackward";
  session.Decide(decision);
  op.algorithm = decision.to_choice;
  return own.get();
}

// ---- activation and softmax ------------------------------------------------------------------

const char* ActivationModeName(cudnnActivationMode_t mode) {
  switch (mode) {
    case CUDNN_ACTIVATION_SIGMOID:
      return "CUDNN_ACTIVATION_SIGMOID";
    case CUDNN_ACTIVATION_RELU:
      return "CUDNN_ACTIVATION_RELU";
    case CUDNN_ACTIVATION_TANH:
      return "CUDNN_ACTIVATION_TANH";
    case CUDNN_ACTIVATION_CLIPPED_RELU:
      return "CUDNN_ACTIVATION_CLIPPED_RELU";
    case CUDNN_ACTIVATION_ELU:
      return "CUDNN_ACTIVATION_ELU";
    case CUDNN_ACTIVATION_IDENTITY:
      return "CUDNN_ACTIVATION_IDENTITY";
    case CUDNN_ACTIVATION_SWISH:
      return "CUDNN_ACTIVATION_SWISH";
  }
  return "CUDNN_ACTIVATION_UNKNOWN";
}

void AddActivationArguments(cudnnActivationDescriptor_t desc, format::OpRecord& op) {
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetActivationDescriptor);
  cudnnActivationMode_t mode;
  cudnnNanPropagation_t nan;
  double coef = 0;
  if (desc == nullptr || get == nullptr || get(desc, &mode, &nan, &coef) != CUDNN_STATUS_SUCCESS) {
    op.args.push_back(TextArgument("mode", "unknown"));
    return;
  }
  op.args.push_back(TextArgument("mode", ActivationModeName(mode)));
  op.args.push_back(DoubleArgument("coef", coef));
}

void AddSoftmaxArguments(cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                         format::OpRecord& op) {
  static constexpr const char* kAlgos[] = {"CUDNN_SOFTMAX_FAST", "CUDNN_SOFTMAX_ACCURATE",
                                           "CUDNN_SOFTMAX_LOG"};
  const auto a = static_cast<unsigned>(algo);
  op.args.push_back(
      TextArgument("algo", a < std::size(kAlgos) ? kAlgos[a] : "CUDNN_SOFTMAX_UNKNOWN"));
  op.args.push_back(TextArgument("mode", mode == CUDNN_SOFTMAX_MODE_INSTANCE
                                             ? "CUDNN_SOFTMAX_MODE_INSTANCE"
                                             : "CUDNN_SOFTMAX_MODE_CHANNEL"));
}

// ---- batch normalization ---------------------------------------------------------------------

const char* BnModeName(cudnnBatchNormMode_t mode) {
  switch (mode) {
    case CUDNN_BATCHNORM_PER_ACTIVATION:
      return "CUDNN_BATCHNORM_PER_ACTIVATION";
    case CUDNN_BATCHNORM_SPATIAL:
      return "CUDNN_BATCHNORM_SPATIAL";
    case CUDNN_BATCHNORM_SPATIAL_PERSISTENT:
      return "CUDNN_BATCHNORM_SPATIAL_PERSISTENT";
  }
  return "CUDNN_BATCHNORM_UNKNOWN";
}

// The forward training pass (plain and Ex): x, scale and bias read; y, the running averages
// (read too unless the factor is 1: they are updated in place) and the saved statistics written.
template <typename Real>
cudnnStatus_t RecordBnForwardTraining(
    Session& session, RealCall<cudnnStatus_t>& call, const char* name, cudnnHandle_t handle,
    cudnnBatchNormMode_t mode, std::optional<int> ops, const void* alpha, const void* beta,
    cudnnTensorDescriptor_t x_desc, const void* x, cudnnTensorDescriptor_t y_desc, void* y,
    cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias, double factor,
    void* running_mean, void* running_var, double epsilon, void* save_mean, void* save_inv_var,
    Real real) {
  const Operand output{"y", y_desc, y};
  const double beta_value = Scale(beta, output);
  const bool update = factor != 1.0;
  return RecordCudnnOp(
      session, call, name, handle,
      {{"x", x_desc, x}, {"bnScale", param_desc, scale}, {"bnBias", param_desc, bias}},
      {{output, beta_value != 0},
       {{"runningMean", param_desc, running_mean}, update},
       {{"runningVariance", param_desc, running_var}, update},
       {{"saveMean", param_desc, save_mean}, false},
       {{"saveInvVariance", param_desc, save_inv_var}, false}},
      [&](format::OpRecord& op) {
        op.args.push_back(TextArgument("mode", BnModeName(mode)));
        if (ops) op.args.push_back(SignedArgument("bnOps", *ops));
        op.args.push_back(DoubleArgument("alpha", Scale(alpha, output)));
        op.args.push_back(DoubleArgument("beta", beta_value));
        op.args.push_back(DoubleArgument("exponentialAverageFactor", factor));
        op.args.push_back(DoubleArgument("epsilon", epsilon));
      },
      real);
}

// The backward pass (plain and Ex): x, dy, scale and the saved statistics read; dx and the
// scale and bias gradients written (read first when their beta is not 0).
template <typename Real>
cudnnStatus_t RecordBnBackward(Session& session, RealCall<cudnnStatus_t>& call, const char* name,
                               cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                               std::optional<int> ops, const void* alpha_data,
                               const void* beta_data, const void* alpha_param,
                               const void* beta_param, cudnnTensorDescriptor_t x_desc,
                               const void* x, cudnnTensorDescriptor_t dy_desc, const void* dy,
                               cudnnTensorDescriptor_t dx_desc, void* dx,
                               cudnnTensorDescriptor_t param_desc, const void* scale, void* dscale,
                               void* dbias, double epsilon, const void* saved_mean,
                               const void* saved_inv_var, Real real) {
  const Operand output{"dx", dx_desc, dx};
  const Operand param_output{"dBnScale", param_desc, dscale};
  const double beta_data_value = Scale(beta_data, output);
  const double beta_param_value = Scale(beta_param, param_output);
  return RecordCudnnOp(
      session, call, name, handle,
      {{"x", x_desc, x},
       {"dy", dy_desc, dy},
       {"bnScale", param_desc, scale},
       {"savedMean", param_desc, saved_mean},
       {"savedInvVariance", param_desc, saved_inv_var}},
      {{output, beta_data_value != 0},
       {param_output, beta_param_value != 0},
       {{"dBnBias", param_desc, dbias}, beta_param_value != 0}},
      [&](format::OpRecord& op) {
        op.args.push_back(TextArgument("mode", BnModeName(mode)));
        if (ops) op.args.push_back(SignedArgument("bnOps", *ops));
        op.args.push_back(DoubleArgument("alphaDataDiff", Scale(alpha_data, output)));
        op.args.push_back(DoubleArgument("betaDataDiff", beta_data_value));
        op.args.push_back(DoubleArgument("alphaParamDiff", Scale(alpha_param, param_output)));
        op.args.push_back(DoubleArgument("betaParamDiff", beta_param_value));
        op.args.push_back(DoubleArgument("epsilon", epsilon));
      },
      real);
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::Operand;
using ndt::tracer::RealCall;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;

extern "C" {

cudnnStatus_t cudnnActivationForward(cudnnHandle_t handle, cudnnActivationDescriptor_t desc,
                                     const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                     const void* x, const void* beta,
                                     const cudnnTensorDescriptor_t y_desc, void* y) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnActivationForward);
  const auto run = [&] { return real(handle, desc, alpha, x_desc, x, beta, y_desc, y); };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnActivationForward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnActivationForward", handle, alpha, beta, {{"x", x_desc, x}},
            {"y", y_desc, y},
            [&](ndt::format::OpRecord& op) { ndt::tracer::AddActivationArguments(desc, op); }, run);
      });
}

cudnnStatus_t cudnnActivationBackward(cudnnHandle_t handle, cudnnActivationDescriptor_t desc,
                                      const void* alpha, const cudnnTensorDescriptor_t y_desc,
                                      const void* y, const cudnnTensorDescriptor_t dy_desc,
                                      const void* dy, const cudnnTensorDescriptor_t x_desc,
                                      const void* x, const void* beta,
                                      const cudnnTensorDescriptor_t dx_desc, void* dx) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnActivationBackward);
  const auto run = [&] {
    return real(handle, desc, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnActivationBackward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnActivationBackward", handle, alpha, beta,
            {{"y", y_desc, y}, {"dy", dy_desc, dy}, {"x", x_desc, x}}, {"dx", dx_desc, dx},
            [&](ndt::format::OpRecord& op) { ndt::tracer::AddActivationArguments(desc, op); }, run);
      });
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t desc,
                                  const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                  const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t y_desc, void* y) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnPoolingForward);
  const auto run = [&] { return real(handle, desc, alpha, x_desc, x, beta, y_desc, y); };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnPoolingForward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnPoolingForward", handle, alpha, beta, {{"x", x_desc, x}},
            {"y", y_desc, y},
            [&](ndt::format::OpRecord& op) {
              ndt::tracer::AddPoolingArguments(ndt::tracer::PoolingOf(desc), op);
            },
            run);
      });
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t desc,
                                   const void* alpha, const cudnnTensorDescriptor_t y_desc,
                                   const void* y, const cudnnTensorDescriptor_t dy_desc,
                                   const void* dy, const cudnnTensorDescriptor_t x_desc,
                                   const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dx_desc, void* dx) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnPoolingBackward);
  const auto run = [&](cudnnPoolingDescriptor_t pooling) {
    return real(handle, pooling, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnPoolingBackward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return run(desc); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        const std::optional<ndt::tracer::Pooling> pooling = ndt::tracer::PoolingOf(desc);
        ndt::tracer::OwnPooling own;
        cudnnPoolingDescriptor_t used = desc;
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnPoolingBackward", handle, alpha, beta,
            {{"y", y_desc, y}, {"dy", dy_desc, dy}, {"x", x_desc, x}}, {"dx", dx_desc, dx},
            [&](ndt::format::OpRecord& op) {
              ndt::tracer::AddPoolingArguments(pooling, op);
              used = ndt::tracer::BackwardPooling(session, op, desc, pooling, own);
            },
            [&] { return run(used); });
      });
}

cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                  cudnnSoftmaxMode_t mode, const void* alpha,
                                  const cudnnTensorDescriptor_t x_desc, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t y_desc, void* y) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnSoftmaxForward);
  const auto run = [&] { return real(handle, algo, mode, alpha, x_desc, x, beta, y_desc, y); };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnSoftmaxForward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnSoftmaxForward", handle, alpha, beta, {{"x", x_desc, x}},
            {"y", y_desc, y},
            [&](ndt::format::OpRecord& op) { ndt::tracer::AddSoftmaxArguments(algo, mode, op); },
            run);
      });
}

cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
                                   cudnnSoftmaxMode_t mode, const void* alpha,
                                   const cudnnTensorDescriptor_t y_desc, const void* y,
                                   const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                   const void* beta, const cudnnTensorDescriptor_t dx_desc,
                                   void* dx) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnSoftmaxBackward);
  const auto run = [&] {
    return real(handle, algo, mode, alpha, y_desc, y, dy_desc, dy, beta, dx_desc, dx);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnSoftmaxBackward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnSoftmaxBackward", handle, alpha, beta,
            {{"y", y_desc, y}, {"dy", dy_desc, dy}}, {"dx", dx_desc, dx},
            [&](ndt::format::OpRecord& op) { ndt::tracer::AddSoftmaxArguments(algo, mode, op); },
            run);
      });
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t x_desc, const void* x, const cudnnTensorDescriptor_t y_desc,
    void* y, const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias,
    double factor, void* running_mean, void* running_var, double epsilon, void* save_mean,
    void* save_inv_var) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnBatchNormalizationForwardTraining);
  const auto run = [&] {
    return real(handle, mode, alpha, beta, x_desc, x, y_desc, y, param_desc, scale, bias, factor,
                running_mean, running_var, epsilon, save_mean, save_inv_var);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBatchNormalizationForwardTraining", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordBnForwardTraining(
            session, call, "cudnnBatchNormalizationForwardTraining", handle, mode, std::nullopt,
            alpha, beta, x_desc, x, y_desc, y, param_desc, scale, bias, factor, running_mean,
            running_var, epsilon, save_mean, save_inv_var, run);
      });
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha,
    const void* beta, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnTensorDescriptor_t z_desc, const void* z, const cudnnTensorDescriptor_t y_desc,
    void* y, const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias,
    double factor, void* running_mean, void* running_var, double epsilon, void* save_mean,
    void* save_inv_var, cudnnActivationDescriptor_t activation, void* workspace,
    size_t workspace_bytes, void* reserve, size_t reserve_bytes) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnBatchNormalizationForwardTrainingEx);
  const auto run = [&] {
    return real(handle, mode, ops, alpha, beta, x_desc, x, z_desc, z, y_desc, y, param_desc, scale,
                bias, factor, running_mean, running_var, epsilon, save_mean, save_inv_var,
                activation, workspace, workspace_bytes, reserve, reserve_bytes);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBatchNormalizationForwardTrainingEx", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      run, [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordBnForwardTraining(
            session, call, "cudnnBatchNormalizationForwardTrainingEx", handle, mode,
            static_cast<int>(ops), alpha, beta, x_desc, x, y_desc, y, param_desc, scale, bias,
            factor, running_mean, running_var, epsilon, save_mean, save_inv_var, run);
      });
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t x_desc, const void* x, const cudnnTensorDescriptor_t y_desc,
    void* y, const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias,
    const void* mean, const void* variance, double epsilon) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnBatchNormalizationForwardInference);
  const auto run = [&] {
    return real(handle, mode, alpha, beta, x_desc, x, y_desc, y, param_desc, scale, bias, mean,
                variance, epsilon);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBatchNormalizationForwardInference", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnBatchNormalizationForwardInference", handle, alpha, beta,
            {{"x", x_desc, x},
             {"bnScale", param_desc, scale},
             {"bnBias", param_desc, bias},
             {"estimatedMean", param_desc, mean},
             {"estimatedVariance", param_desc, variance}},
            {"y", y_desc, y},
            [&](ndt::format::OpRecord& op) {
              op.args.push_back(ndt::tracer::TextArgument("mode", ndt::tracer::BnModeName(mode)));
              op.args.push_back(ndt::tracer::DoubleArgument("epsilon", epsilon));
            },
            run);
      });
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha_data, const void* beta_data,
    const void* alpha_param, const void* beta_param, const cudnnTensorDescriptor_t x_desc,
    const void* x, const cudnnTensorDescriptor_t dy_desc, const void* dy,
    const cudnnTensorDescriptor_t dx_desc, void* dx, const cudnnTensorDescriptor_t param_desc,
    const void* scale, void* dscale, void* dbias, double epsilon, const void* saved_mean,
    const void* saved_inv_var) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnBatchNormalizationBackward);
  const auto run = [&] {
    return real(handle, mode, alpha_data, beta_data, alpha_param, beta_param, x_desc, x, dy_desc,
                dy, dx_desc, dx, param_desc, scale, dscale, dbias, epsilon, saved_mean,
                saved_inv_var);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBatchNormalizationBackward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordBnBackward(
            session, call, "cudnnBatchNormalizationBackward", handle, mode, std::nullopt,
            alpha_data, beta_data, alpha_param, beta_param, x_desc, x, dy_desc, dy, dx_desc, dx,
            param_desc, scale, dscale, dbias, epsilon, saved_mean, saved_inv_var, run);
      });
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const void* alpha_data, const void* beta_data, const void* alpha_param, const void* beta_param,
    const cudnnTensorDescriptor_t x_desc, const void* x, const cudnnTensorDescriptor_t y_desc,
    const void* y, const cudnnTensorDescriptor_t dy_desc, const void* dy,
    const cudnnTensorDescriptor_t dz_desc, void* dz, const cudnnTensorDescriptor_t dx_desc,
    void* dx, const cudnnTensorDescriptor_t param_desc, const void* scale, const void* bias,
    void* dscale, void* dbias, double epsilon, const void* saved_mean, const void* saved_inv_var,
    cudnnActivationDescriptor_t activation, void* workspace, size_t workspace_bytes, void* reserve,
    size_t reserve_bytes) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnBatchNormalizationBackwardEx);
  const auto run = [&] {
    return real(handle, mode, ops, alpha_data, beta_data, alpha_param, beta_param, x_desc, x,
                y_desc, y, dy_desc, dy, dz_desc, dz, dx_desc, dx, param_desc, scale, bias, dscale,
                dbias, epsilon, saved_mean, saved_inv_var, activation, workspace, workspace_bytes,
                reserve, reserve_bytes);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBatchNormalizationBackwardEx", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordBnBackward(
            session, call, "cudnnBatchNormalizationBackwardEx", handle, mode, static_cast<int>(ops),
            alpha_data, beta_data, alpha_param, beta_param, x_desc, x, dy_desc, dy, dx_desc, dx,
            param_desc, scale, dscale, dbias, epsilon, saved_mean, saved_inv_var, run);
      });
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha,
                             const cudnnTensorDescriptor_t a_desc, const void* a, const void* beta,
                             const cudnnTensorDescriptor_t c_desc, void* c) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kCudnn, cudnnAddTensor);
  const auto run = [&] { return real(handle, alpha, a_desc, a, beta, c_desc, c); };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnAddTensor", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        return ndt::tracer::RecordTensorOp(
            session, call, "cudnnAddTensor", handle, alpha, beta, {{"A", a_desc, a}},
            {"C", c_desc, c}, [](ndt::format::OpRecord&) {}, run);
      });
}

}  // extern "C"
