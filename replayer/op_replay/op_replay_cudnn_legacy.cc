// Standalone replay of cuDNN legacy convolutions (cudnnConvolution{Forward,BackwardData,
// BackwardFilter}) in f32, f64, f16 and bf16: the descriptors are rebuilt from the op's
// recorded arguments, its captured tensors uploaded, and the recorded algorithm (and, with
// --try-deterministic, every deterministic one) run through the real libcudnn.so.9.
#include <cudnn.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "libfacts/cudnn_conv.h"
#include "replayer/op_replay/op_replay_cudnn_types.h"
#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {
namespace {

#define NDT_CUDNN_FUNCTIONS(X)                                                                  \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy)                      \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensor4dDescriptorEx) X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor)  \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolution2dDescriptor)                        \
  X(cudnnSetConvolutionMathType) X(cudnnSetConvolutionGroupCount)                               \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolutionForwardWorkspaceSize)               \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                               \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionForward)                  \
  X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter)

struct Cudnn {
#define NDT_CUDNN_SLOT(name) decltype(&::name) name = nullptr;
  NDT_CUDNN_FUNCTIONS(NDT_CUDNN_SLOT)
#undef NDT_CUDNN_SLOT

  std::string Error(const char* api, cudnnStatus_t status) const {
    return fmt::format("{}: {}", api, cudnnGetErrorString(status));
  }
};

StatusOr<const Cudnn*> LoadCudnn() {
  return LoadOnce<Cudnn>("libcudnn.so.9", [](void* library, Cudnn* cudnn, std::string* missing) {
#define NDT_RESOLVE(name) Resolve(library, #name, &cudnn->name, missing);
    NDT_CUDNN_FUNCTIONS(NDT_RESOLVE)
#undef NDT_RESOLVE
  });
}

// The values of libfacts::ConvDirection.
enum class Direction { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

format::Determinism AlgoDeterminism(Direction direction, int64_t algo) {
  return libfacts::ConvAlgoNondeterministic(static_cast<libfacts::ConvDirection>(direction), algo)
             ? format::Determinism::kNondeterministic
             : format::Determinism::kDeterministic;
}

int AlgoCount(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Direction::kBackwardData:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case Direction::kBackwardFilter:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

std::string AlgoName(Direction direction, int64_t algo) {
  return libfacts::ConvAlgoName(static_cast<libfacts::ConvDirection>(direction), algo);
}

// A recorded convolution, rebuilt from the op's arguments.
struct Convolution {
  Direction direction = Direction::kForward;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  std::vector<int64_t> x_dims, x_strides, w_dims, y_dims, y_strides, pad, stride, dilation;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  cudnnTensorFormat_t filter_format = CUDNN_TENSOR_NCHW;
  int groups = 1;
  double alpha = 1;
  double beta = 0;
  int64_t algo = -1;
  std::string fingerprint;
  // Buffers by position: 0 the x-side tensor (x or dx), 1 the filter (w or dw), 2 the y-side
  // tensor (y or dy).
  std::string roles[3];
  int output = 2;
};

uint64_t TensorBytes(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                     cudnnDataType_t dtype) {
  uint64_t last = 0;
  for (size_t i = 0; i < 4; ++i) last += static_cast<uint64_t>(dims[i] - 1) * strides[i];
  return (last + 1) * ElementBytes(dtype);
}

uint64_t FilterBytes(const std::vector<int64_t>& dims, cudnnDataType_t dtype) {
  uint64_t count = 1;
  for (int64_t dim : dims) count *= static_cast<uint64_t>(dim);
  return count * ElementBytes(dtype);
}

StatusOr<Convolution> DescribeConvolution(const format::OpRecord& op) {
  Convolution c;
  if (op.name == "cudnnConvolutionForward") {
    c.direction = Direction::kForward;
  } else if (op.name == "cudnnConvolutionBackwardData") {
    c.direction = Direction::kBackwardData;
  } else {
    c.direction = Direction::kBackwardFilter;
  }
  static constexpr const char* kRoles[3][3] = {
      {"x", "w", "y"}, {"dx", "w", "dy"}, {"x", "dw", "dy"}};
  static constexpr int kOutput[3] = {2, 0, 1};
  for (int i = 0; i < 3; ++i) c.roles[i] = kRoles[static_cast<int>(c.direction)][i];
  c.output = kOutput[static_cast<int>(c.direction)];

  std::string missing;
  const auto dims = [&](const char* name, size_t size, std::vector<int64_t>* out) {
    const format::Argument* argument = FindArgument(op, name);
    const auto* value = argument == nullptr ? nullptr
                                            : std::get_if<format::Argument::Dims>(&argument->value);
    if (value == nullptr || value->size() != size ||
        std::any_of(value->begin(), value->end(), [](int64_t v) { return v < 0 || v > INT32_MAX; })) {
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
      return;
    }
    *out = *value;
  };
  dims("x_dims", 4, &c.x_dims);
  dims("x_strides", 4, &c.x_strides);
  dims("w_dims", 4, &c.w_dims);
  dims("y_dims", 4, &c.y_dims);
  dims("y_strides", 4, &c.y_strides);
  dims("pad", 2, &c.pad);
  dims("stride", 2, &c.stride);
  dims("dilation", 2, &c.dilation);
  const std::string* dtype = TextOf(op, "dtype");
  const std::string* compute = TextOf(op, "compute");
  const std::string* mode = TextOf(op, "mode");
  const std::string* fingerprint = TextOf(op, "fingerprint");
  const format::Argument* math = FindArgument(op, "math");
  const format::Argument* alpha = FindArgument(op, "alpha");
  const format::Argument* beta = FindArgument(op, "beta");
  if (dtype == nullptr || !DataType(*dtype)) missing += missing.empty() ? "dtype" : ", dtype";
  if (compute == nullptr || !DataType(*compute)) {
    missing += missing.empty() ? "compute" : ", compute";
  }
  if (mode == nullptr) missing += missing.empty() ? "mode" : ", mode";
  if (fingerprint == nullptr) missing += missing.empty() ? "fingerprint" : ", fingerprint";
  if (math == nullptr || !std::holds_alternative<uint64_t>(math->value)) {
    missing += missing.empty() ? "math" : ", math";
  }
  if (alpha == nullptr || !std::holds_alternative<double>(alpha->value) || beta == nullptr ||
      !std::holds_alternative<double>(beta->value)) {
    missing += missing.empty() ? "alpha/beta" : ", alpha/beta";
  }
  if (!op.algorithm) missing += missing.empty() ? "algorithm" : ", algorithm";
  if (!missing.empty()) {
    return Status::Error(fmt::format(
        "op {} lacks what is needed to rebuild its convolution: {}", op.sequence, missing));
  }
  c.dtype = *DataType(*dtype);
  c.compute = *DataType(*compute);
  c.mode = *mode == "convolution" ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
  c.math = static_cast<cudnnMathType_t>(std::get<uint64_t>(math->value));
  c.alpha = std::get<double>(alpha->value);
  c.beta = std::get<double>(beta->value);
  c.algo = op.algorithm->id;
  c.fingerprint = *fingerprint;
  // What the arguments do not carry separately: the group count and the filter layout.
  if (const size_t at = c.fingerprint.find(" groups="); at != std::string::npos) {
    c.groups = std::max(1, std::atoi(c.fingerprint.c_str() + at + 8));
  }
  if (const size_t at = c.fingerprint.find(" format"); at != std::string::npos) {
    c.filter_format = static_cast<cudnnTensorFormat_t>(std::atoi(c.fingerprint.c_str() + at + 7));
  }
  return c;
}

// The descriptors of one convolution, destroyed with it.
class Descriptors {
 public:
  explicit Descriptors(const Cudnn& cudnn) : cudnn_(cudnn) {}
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (x != nullptr) cudnn_.cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnn_.cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnn_.cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnn_.cudnnDestroyConvolutionDescriptor(conv);
    if (handle != nullptr) cudnn_.cudnnDestroy(handle);
  }

  Status Build(const Convolution& c) {
    const auto check = [&](const char* api, cudnnStatus_t status) {
      return status == CUDNN_STATUS_SUCCESS ? Status::Ok()
                                            : Status::Error(cudnn_.Error(api, status));
    };
    const auto i = [](int64_t value) { return static_cast<int>(value); };
    Status status = check("cudnnCreate", cudnn_.cudnnCreate(&handle));
    if (status.ok()) status = check("cudnnCreateTensorDescriptor",
                                    cudnn_.cudnnCreateTensorDescriptor(&x));
    if (status.ok()) status = check("cudnnCreateTensorDescriptor",
                                    cudnn_.cudnnCreateTensorDescriptor(&y));
    if (status.ok()) status = check("cudnnCreateFilterDescriptor",
                                    cudnn_.cudnnCreateFilterDescriptor(&w));
    if (status.ok()) status = check("cudnnCreateConvolutionDescriptor",
                                    cudnn_.cudnnCreateConvolutionDescriptor(&conv));
    if (status.ok()) {
      status = check("cudnnSetTensor4dDescriptorEx",
                     cudnn_.cudnnSetTensor4dDescriptorEx(
                         x, c.dtype, i(c.x_dims[0]), i(c.x_dims[1]), i(c.x_dims[2]),
                         i(c.x_dims[3]), i(c.x_strides[0]), i(c.x_strides[1]),
                         i(c.x_strides[2]), i(c.x_strides[3])));
    }
    if (status.ok()) {
      status = check("cudnnSetTensor4dDescriptorEx",
                     cudnn_.cudnnSetTensor4dDescriptorEx(
                         y, c.dtype, i(c.y_dims[0]), i(c.y_dims[1]), i(c.y_dims[2]),
                         i(c.y_dims[3]), i(c.y_strides[0]), i(c.y_strides[1]),
                         i(c.y_strides[2]), i(c.y_strides[3])));
    }
    if (status.ok()) {
      status = check("cudnnSetFilter4dDescriptor",
                     cudnn_.cudnnSetFilter4dDescriptor(w, c.dtype, c.filter_format,
                                                       i(c.w_dims[0]), i(c.w_dims[1]),
                                                       i(c.w_dims[2]), i(c.w_dims[3])));
    }
    if (status.ok()) {
      status = check("cudnnSetConvolution2dDescriptor",
                     cudnn_.cudnnSetConvolution2dDescriptor(
                         conv, i(c.pad[0]), i(c.pad[1]), i(c.stride[0]), i(c.stride[1]),
                         i(c.dilation[0]), i(c.dilation[1]), c.mode, c.compute));
    }
    if (status.ok()) {
      status = check("cudnnSetConvolutionMathType",
                     cudnn_.cudnnSetConvolutionMathType(conv, c.math));
    }
    if (status.ok() && c.groups != 1) {
      status = check("cudnnSetConvolutionGroupCount",
                     cudnn_.cudnnSetConvolutionGroupCount(conv, c.groups));
    }
    return status;
  }

  // The workspace `algo` needs, or why it cannot run this problem.
  StatusOr<size_t> Workspace(Direction direction, int64_t algo) const {
    size_t bytes = 0;
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    switch (direction) {
      case Direction::kForward:
        status = cudnn_.cudnnGetConvolutionForwardWorkspaceSize(
            handle, x, w, conv, y, static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
        break;
      case Direction::kBackwardData:
        status = cudnn_.cudnnGetConvolutionBackwardDataWorkspaceSize(
            handle, w, y, conv, x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
        break;
      case Direction::kBackwardFilter:
        status = cudnn_.cudnnGetConvolutionBackwardFilterWorkspaceSize(
            handle, x, y, conv, w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
        break;
    }
    if (status != CUDNN_STATUS_SUCCESS) {
      return Status::Error(fmt::format("not supported for this problem ({})",
                                       cudnn_.cudnnGetErrorString(status)));
    }
    return bytes;
  }

  cudnnStatus_t Run(const Convolution& c, int64_t algo, void* const buffers[3], void* workspace,
                    size_t workspace_bytes) const {
    const float alpha_f = static_cast<float>(c.alpha), beta_f = static_cast<float>(c.beta);
    const bool wide = c.compute == CUDNN_DATA_DOUBLE;
    const void* alpha = wide ? static_cast<const void*>(&c.alpha) : &alpha_f;
    const void* beta = wide ? static_cast<const void*>(&c.beta) : &beta_f;
    switch (c.direction) {
      case Direction::kForward:
        return cudnn_.cudnnConvolutionForward(
            handle, alpha, x, buffers[0], w, buffers[1], conv,
            static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, workspace_bytes, beta, y,
            buffers[2]);
      case Direction::kBackwardData:
        return cudnn_.cudnnConvolutionBackwardData(
            handle, alpha, w, buffers[1], y, buffers[2], conv,
            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace, workspace_bytes, beta,
            x, buffers[0]);
      case Direction::kBackwardFilter:
        return cudnn_.cudnnConvolutionBackwardFilter(
            handle, alpha, x, buffers[0], y, buffers[2], conv,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), workspace, workspace_bytes,
            beta, w, buffers[1]);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }

  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

 private:
  const Cudnn& cudnn_;
};

bool HandlesConvolution(const format::OpRecord& op) {
  return op.kind == format::OpKind::kCudnnConvolution &&
         (op.name == "cudnnConvolutionForward" || op.name == "cudnnConvolutionBackwardData" ||
          op.name == "cudnnConvolutionBackwardFilter");
}

const char* DtypeText(cudnnDataType_t dtype) {
  return dtype == CUDNN_DATA_FLOAT ? "f32" : dtype == CUDNN_DATA_DOUBLE ? "f64" : "";
}

StatusOr<OpReplayReport> ReplayConvolution(format::TraceReader& reader,
                                           const format::OpRecord& op,
                                           const OpReplayOptions& options) {
  StatusOr<Convolution> described = DescribeConvolution(op);
  if (!described.ok()) return described.status();
  const Convolution& c = *described;
  const uint64_t sizes[3] = {TensorBytes(c.x_dims, c.x_strides, c.dtype),
                             FilterBytes(c.w_dims, c.dtype),
                             TensorBytes(c.y_dims, c.y_strides, c.dtype)};

  // The captured bytes of every buffer the call reads, and of its recorded output.
  ReplayBuffers buffers;
  buffers.buffers.resize(3);
  buffers.output = static_cast<size_t>(c.output);
  buffers.output_bytes = sizes[c.output];
  buffers.output_dtype = DtypeText(c.dtype);
  for (int i = 0; i < 3; ++i) {
    StatusOr<std::optional<std::string>> input = ReadCaptured(reader, op, "in", c.roles[i], sizes[i]);
    if (!input.ok()) return input.status();
    const bool needed = i != c.output || c.beta != 0;
    if (needed && !*input) {
      return Status::Error(fmt::format("op {} was captured without its input {}", op.sequence,
                                       c.roles[i]));
    }
    // beta = 0: the output is overwritten by the call; zeros keep every run alike.
    buffers.buffers[i].initial = *input ? std::move(**input) : std::string(sizes[i], '\0');
  }
  StatusOr<std::optional<std::string>> output =
      ReadCaptured(reader, op, "out", c.roles[c.output], sizes[c.output]);
  if (!output.ok()) return output.status();
  buffers.recorded_output = std::move(*output);

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const Cudnn*> loaded_cudnn = LoadCudnn();
  if (!loaded_cudnn.ok()) return loaded_cudnn.status();
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;

  Descriptors descriptors(**loaded_cudnn);
  if (Status status = descriptors.Build(c); !status.ok()) {
    return status.Prefixed(fmt::format("rebuilding op {}", op.sequence));
  }
  std::vector<DeviceBuffer> memory;
  for (int i = 0; i < 3; ++i) {
    StatusOr<DeviceBuffer> buffer = Allocate(driver, sizes[i]);
    if (!buffer.ok()) return buffer.status();
    buffers.buffers[i].address = buffer->address();
    memory.push_back(std::move(*buffer));
  }
  void* const pointers[3] = {memory[0].pointer(), memory[1].pointer(), memory[2].pointer()};

  OpReplayReport report;
  report.problem = c.fingerprint;
  report.output_role = c.roles[c.output];
  report.output_bytes = sizes[c.output];

  const auto run_algorithm = [&](int64_t algo, bool recorded) -> StatusOr<AlgorithmRuns> {
    AlgorithmRuns runs;
    runs.algo = algo;
    runs.name = AlgoName(c.direction, algo);
    runs.determinism = recorded && op.algorithm->determinism != format::Determinism::kUnknown
                           ? op.algorithm->determinism
                           : AlgoDeterminism(c.direction, algo);
    runs.recorded = recorded;
    StatusOr<size_t> workspace_bytes = descriptors.Workspace(c.direction, algo);
    if (!workspace_bytes.ok()) {
      runs.skipped = workspace_bytes.status().message();
      return runs;
    }
    StatusOr<DeviceBuffer> workspace = Allocate(driver, *workspace_bytes);
    if (!workspace.ok()) return workspace.status();
    return RunCandidate(driver, buffers, std::move(runs), options.repeat,
                        [&]() -> std::optional<std::string> {
                          const cudnnStatus_t status = descriptors.Run(
                              c, algo, pointers,
                              *workspace_bytes == 0 ? nullptr : workspace->pointer(),
                              *workspace_bytes);
                          if (status == CUDNN_STATUS_SUCCESS) return std::nullopt;
                          return loaded_cudnn.value()->Error(op.name.c_str(), status);
                        });
  };

  StatusOr<AlgorithmRuns> recorded = run_algorithm(c.algo, true);
  if (!recorded.ok()) {
    return recorded.status().Prefixed(
        fmt::format("replaying op {} with {}", op.sequence, AlgoName(c.direction, c.algo)));
  }
  if (!recorded->skipped.empty()) {
    return Status::Error(fmt::format("replaying op {}: its recorded algorithm {} is {}",
                                     op.sequence, recorded->name, recorded->skipped));
  }
  report.algorithms.push_back(std::move(*recorded));
  if (options.try_deterministic) {
    for (int64_t algo = 0; algo < AlgoCount(c.direction); ++algo) {
      if (algo == c.algo) continue;
      if (AlgoDeterminism(c.direction, algo) != format::Determinism::kDeterministic) continue;
      StatusOr<AlgorithmRuns> alternative = run_algorithm(algo, false);
      if (!alternative.ok()) {
        return alternative.status().Prefixed(
            fmt::format("replaying op {} with {}", op.sequence, AlgoName(c.direction, algo)));
      }
      report.algorithms.push_back(std::move(*alternative));
    }
  }
  return report;
}

}  // namespace

const Replayer kCudnnLegacyReplayer = {HandlesConvolution, ReplayConvolution};

}  // namespace ndt::replay::internal
