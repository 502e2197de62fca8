#include "replayer/op_replay.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <variant>

#if __has_include(<cuda.h>) && __has_include(<cudnn.h>)
#include <cuda.h>
#include <cudnn.h>
#define NDT_OP_REPLAY_HAS_CUDA 1
#else
#define NDT_OP_REPLAY_HAS_CUDA 0
#endif

namespace ndt::replay {
namespace {

const format::Argument* FindArgument(const format::OpRecord& op, const std::string& name) {
  for (const format::Argument& argument : op.args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

const std::string* TextOf(const format::OpRecord& op, const std::string& name) {
  const format::Argument* argument = FindArgument(op, name);
  return argument == nullptr ? nullptr : std::get_if<std::string>(&argument->value);
}

// A blob id written by the tracer as 32 hex digits, low 64 bits first.
std::optional<format::BlobId> ParseBlobId(const std::string& text) {
  if (text.size() != 32) return std::nullopt;
  uint64_t halves[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    uint64_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    halves[i / 16] = halves[i / 16] << 4 | digit;
  }
  return format::BlobId{halves[0], halves[1]};
}

}  // namespace

Status CheckCaptured(const format::OpRecord& op) {
  std::string missing;
  bool any = false;
  for (const format::Argument& argument : op.args) {
    if (argument.name.rfind("blob:in:", 0) != 0) continue;
    any = true;
    const auto* text = std::get_if<std::string>(&argument.value);
    if (text == nullptr || !ParseBlobId(*text)) {
      missing += fmt::format("{}{} ({})", missing.empty() ? "" : ", ", argument.name.substr(8),
                             text == nullptr ? "not text" : *text);
    }
  }
  if (!any) {
    return Status::Error(fmt::format(
        "op {} ({}) was not captured: record it with `ndtrace record --capture {} -- ...`",
        op.sequence, op.name, op.sequence));
  }
  if (!missing.empty()) {
    return Status::Error(
        fmt::format("op {} ({}) was captured without some inputs: {}", op.sequence, op.name,
                    missing));
  }
  return Status::Ok();
}

Status CheckReplayable(const format::OpRecord& op) {
  if (op.kind == format::OpKind::kCudnnConvolution &&
      (op.name == "cudnnConvolutionForward" || op.name == "cudnnConvolutionBackwardData" ||
       op.name == "cudnnConvolutionBackwardFilter")) {
    return Status::Ok();
  }
  return Status::Error(fmt::format(
      "op {} is a {} ({}); standalone replay re-executes cuDNN legacy convolutions only",
      op.sequence, format::OpKindName(op.kind), op.name));
}

std::vector<std::string> MachineMismatches(const format::TraceHeader& header, uint32_t ordinal,
                                           const MachineFacts& machine) {
  std::vector<std::string> mismatches;
  const format::GpuInfo* recorded = nullptr;
  for (const format::GpuInfo& gpu : header.gpus) {
    if (gpu.ordinal == ordinal) recorded = &gpu;
  }
  if (recorded == nullptr) {
    mismatches.push_back(
        fmt::format("the trace does not say which GPU its device {} was", ordinal));
  } else {
    if (recorded->name != machine.gpu_name) {
      mismatches.push_back(fmt::format("GPU '{}' in the trace, '{}' here", recorded->name,
                                       machine.gpu_name));
    }
    if (recorded->cc_major != machine.cc_major || recorded->cc_minor != machine.cc_minor) {
      mismatches.push_back(fmt::format("compute capability {}.{} in the trace, {}.{} here",
                                       recorded->cc_major, recorded->cc_minor, machine.cc_major,
                                       machine.cc_minor));
    }
  }
  if (header.versions.driver != machine.driver) {
    mismatches.push_back(fmt::format("driver {} in the trace, {} here", header.versions.driver,
                                     machine.driver));
  }
  return mismatches;
}

#if NDT_OP_REPLAY_HAS_CUDA

namespace {

// ---- the driver, as the libraries reach it ----------------------------------------------

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*driver_version)(int*) = nullptr;
  CUresult (*device_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*copy_to_device)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*copy_to_host)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*synchronize)() = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;

  std::string Error(const char* api, CUresult result) const {
    const char* text = nullptr;
    if (error_string == nullptr || error_string(result, &text) != CUDA_SUCCESS ||
        text == nullptr) {
      text = "unknown error";
    }
    return fmt::format("{}: {} ({})", api, text, static_cast<int>(result));
  }
};

StatusOr<const Driver*> LoadDriver() {
  static Driver driver;
  static std::string failure;
  static bool loaded = false;
  if (loaded) {
    if (!failure.empty()) return Status::Error(failure);
    return &driver;
  }
  loaded = true;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    failure = fmt::format("cannot load the CUDA driver libcuda.so.1: {}",
                          why != nullptr ? why : "not found");
    return Status::Error(failure);
  }
  const auto get_proc_address =
      reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*)>(
          dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr) {
    failure = "the CUDA driver libcuda.so.1 has no cuGetProcAddress_v2 (driver older than 12.0)";
    return Status::Error(failure);
  }
  std::string missing;
  const auto resolve = [&](const char* name, auto* slot) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc_address(name, &function, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) ==
            CUDA_SUCCESS &&
        found == CU_GET_PROC_ADDRESS_SUCCESS && function != nullptr) {
      *slot = reinterpret_cast<std::remove_reference_t<decltype(*slot)>>(function);
    } else {
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
    }
  };
  resolve("cuInit", &driver.init);
  resolve("cuDriverGetVersion", &driver.driver_version);
  resolve("cuDeviceGetCount", &driver.device_count);
  resolve("cuDeviceGet", &driver.device_get);
  resolve("cuDeviceGetName", &driver.device_name);
  resolve("cuDeviceGetAttribute", &driver.device_attribute);
  resolve("cuDevicePrimaryCtxRetain", &driver.primary_retain);
  resolve("cuCtxSetCurrent", &driver.set_current);
  resolve("cuMemAlloc", &driver.mem_alloc);
  resolve("cuMemFree", &driver.mem_free);
  resolve("cuMemcpyHtoD", &driver.copy_to_device);
  resolve("cuMemcpyDtoH", &driver.copy_to_host);
  resolve("cuCtxSynchronize", &driver.synchronize);
  resolve("cuGetErrorString", &driver.error_string);
  if (!missing.empty()) {
    failure = "the CUDA driver lacks " + missing;
    return Status::Error(failure);
  }
  if (const CUresult result = driver.init(0); result != CUDA_SUCCESS) {
    failure = driver.Error("cuInit", result);
    return Status::Error(failure);
  }
  return &driver;
}

// A device allocation, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(const Driver& driver, CUdeviceptr address, size_t bytes)
      : driver_(&driver), address_(address), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : driver_(other.driver_), address_(std::exchange(other.address_, 0)), bytes_(other.bytes_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (address_ != 0) driver_->mem_free(address_);
  }
  CUdeviceptr address() const { return address_; }
  void* pointer() const { return reinterpret_cast<void*>(address_); }
  size_t bytes() const { return bytes_; }

 private:
  const Driver* driver_;
  CUdeviceptr address_;
  size_t bytes_;
};

StatusOr<DeviceBuffer> Allocate(const Driver& driver, size_t bytes) {
  CUdeviceptr address = 0;
  if (const CUresult result = driver.mem_alloc(&address, std::max<size_t>(bytes, 1));
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuMemAlloc", result) +
                         fmt::format(" ({} bytes)", bytes));
  }
  return DeviceBuffer(driver, address, bytes);
}

// ---- cuDNN ------------------------------------------------------------------------------

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
  static Cudnn cudnn;
  static std::string failure;
  static bool loaded = false;
  if (loaded) {
    if (!failure.empty()) return Status::Error(failure);
    return &cudnn;
  }
  loaded = true;
  void* library = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    failure = fmt::format("cannot load cuDNN (libcudnn.so.9): {}", why != nullptr ? why : "");
    return Status::Error(failure);
  }
  std::string missing;
#define NDT_CUDNN_RESOLVE(name)                                                  \
  cudnn.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name));       \
  if (cudnn.name == nullptr) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", #name);
  NDT_CUDNN_FUNCTIONS(NDT_CUDNN_RESOLVE)
#undef NDT_CUDNN_RESOLVE
  if (!missing.empty()) {
    failure = "libcudnn.so.9 lacks " + missing;
    return Status::Error(failure);
  }
  return &cudnn;
}

enum class Direction { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// As cuDNN documents it (and tracer/hooks_cudnn.cc records it): BWD_DATA_ALGO_0 and
// BWD_FILTER_ALGO_0 / _3 are nondeterministic.
format::Determinism AlgoDeterminism(Direction direction, int64_t algo) {
  const bool nondeterministic =
      (direction == Direction::kBackwardData && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
      (direction == Direction::kBackwardFilter && (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                                                   algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
  return nondeterministic ? format::Determinism::kNondeterministic
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
  static constexpr const char* kForward[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static constexpr const char* kData[] = {"0",          "1",        "FFT",
                                          "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr const char* kFilter[] = {
      "0", "1", "FFT", "3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const auto pick = [algo](const auto& names, const char* prefix) {
    if (algo < 0 || algo >= static_cast<int64_t>(std::size(names))) {
      return fmt::format("{}{}", prefix, algo);
    }
    return std::string(prefix) + names[algo];
  };
  switch (direction) {
    case Direction::kForward:
      return pick(kForward, "CUDNN_CONVOLUTION_FWD_ALGO_");
    case Direction::kBackwardData:
      return pick(kData, "CUDNN_CONVOLUTION_BWD_DATA_ALGO_");
    case Direction::kBackwardFilter:
      return pick(kFilter, "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_");
  }
  return std::to_string(algo);
}

std::optional<cudnnDataType_t> DataType(const std::string& text) {
  static const std::map<std::string, cudnnDataType_t> kTypes = {
      {"f32", CUDNN_DATA_FLOAT}, {"f64", CUDNN_DATA_DOUBLE},   {"f16", CUDNN_DATA_HALF},
      {"bf16", CUDNN_DATA_BFLOAT16}, {"i8", CUDNN_DATA_INT8}, {"i32", CUDNN_DATA_INT32},
      {"u8", CUDNN_DATA_UINT8},  {"i64", CUDNN_DATA_INT64}};
  const auto found = kTypes.find(text);
  if (found == kTypes.end()) return std::nullopt;
  return found->second;
}

size_t ElementBytes(cudnnDataType_t dtype) {
  switch (dtype) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
      return 8;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
      return 4;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
      return 2;
    default:
      return 1;
  }
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

// Largest absolute and relative element differences between two outputs of `dtype`.
void CompareValues(cudnnDataType_t dtype, const std::string& a, const std::string& b,
                   AlgorithmRuns* runs) {
  const auto compare = [&](auto zero) {
    using T = decltype(zero);
    const size_t count = std::min(a.size(), b.size()) / sizeof(T);
    for (size_t i = 0; i < count; ++i) {
      T u, v;
      std::memcpy(&u, a.data() + i * sizeof(T), sizeof(T));
      std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
      const double x = static_cast<double>(u), y = static_cast<double>(v);
      if (std::isnan(x) || std::isnan(y)) continue;
      const double diff = std::fabs(x - y);
      const double scale = std::max(std::fabs(x), std::fabs(y));
      runs->max_abs_diff = std::max(runs->max_abs_diff, diff);
      if (scale > 0) runs->max_rel_diff = std::max(runs->max_rel_diff, diff / scale);
    }
    runs->compared_values = true;
  };
  if (dtype == CUDNN_DATA_FLOAT) compare(0.0f);
  if (dtype == CUDNN_DATA_DOUBLE) compare(0.0);
}

}  // namespace

StatusOr<MachineFacts> QueryMachine(uint32_t ordinal) {
  StatusOr<const Driver*> loaded = LoadDriver();
  if (!loaded.ok()) return loaded.status();
  const Driver& driver = **loaded;
  int count = 0;
  if (const CUresult result = driver.device_count(&count); result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGetCount", result));
  }
  if (static_cast<int64_t>(ordinal) >= count) {
    return Status::Error(fmt::format("this machine has {} GPU{}, not a device {}", count,
                                     count == 1 ? "" : "s", ordinal));
  }
  CUdevice device = 0;
  if (const CUresult result = driver.device_get(&device, static_cast<int>(ordinal));
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGet", result));
  }
  MachineFacts facts;
  char name[256] = {};
  if (const CUresult result = driver.device_name(name, sizeof(name) - 1, device);
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGetName", result));
  }
  facts.gpu_name = name;
  int value = 0;
  if (driver.device_attribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) ==
      CUDA_SUCCESS) {
    facts.cc_major = static_cast<uint32_t>(value);
  }
  if (driver.device_attribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) ==
      CUDA_SUCCESS) {
    facts.cc_minor = static_cast<uint32_t>(value);
  }
  int version = 0;
  if (driver.driver_version(&version) == CUDA_SUCCESS) facts.driver = static_cast<uint32_t>(version);
  return facts;
}

StatusOr<OpReplayReport> ReplayOp(format::TraceReader& reader, const format::OpRecord& op,
                                  const OpReplayOptions& options) {
  if (Status status = CheckReplayable(op); !status.ok()) return status;
  if (Status status = CheckCaptured(op); !status.ok()) return status;
  StatusOr<Convolution> described = DescribeConvolution(op);
  if (!described.ok()) return described.status();
  const Convolution& c = *described;
  const uint64_t sizes[3] = {TensorBytes(c.x_dims, c.x_strides, c.dtype),
                             FilterBytes(c.w_dims, c.dtype),
                             TensorBytes(c.y_dims, c.y_strides, c.dtype)};

  // The captured bytes of every buffer the call reads, and of its recorded output.
  std::string inputs[3];
  bool have_input[3] = {false, false, false};
  std::optional<std::string> recorded_output;
  for (int i = 0; i < 3; ++i) {
    for (const char* direction : {"in", "out"}) {
      const bool is_output = std::strcmp(direction, "out") == 0;
      if (is_output && i != c.output) continue;
      const std::string name = fmt::format("blob:{}:{}", direction, c.roles[i]);
      const std::string* text = TextOf(op, name);
      if (text == nullptr) continue;
      const std::optional<format::BlobId> id = ParseBlobId(*text);
      if (!id) continue;  // "missing: ..." for an output; inputs were checked above
      StatusOr<std::string> bytes = reader.ReadBlob(*id, uint64_t{1} << 32);
      if (!bytes.ok()) {
        return Status::Error(fmt::format("captured {} of op {}: {}", c.roles[i], op.sequence,
                                         bytes.status().message()));
      }
      if (bytes->size() != sizes[i]) {
        return Status::Error(fmt::format(
            "captured {} of op {} holds {} bytes, its descriptors describe {}", c.roles[i],
            op.sequence, bytes->size(), sizes[i]));
      }
      if (is_output) {
        recorded_output = std::move(*bytes);
      } else {
        inputs[i] = std::move(*bytes);
        have_input[i] = true;
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    const bool needed = i != c.output || c.beta != 0;
    if (needed && !have_input[i]) {
      return Status::Error(fmt::format("op {} was captured without its input {}", op.sequence,
                                       c.roles[i]));
    }
    if (!have_input[i]) inputs[i].assign(sizes[i], '\0');  // beta = 0: overwritten by the call
  }

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const Cudnn*> loaded_cudnn = LoadCudnn();
  if (!loaded_cudnn.ok()) return loaded_cudnn.status();
  const Cudnn& cudnn = **loaded_cudnn;

  CUdevice device = 0;
  CUcontext context = nullptr;
  if (const CUresult result = driver.device_get(&device, static_cast<int>(op.device_ordinal));
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGet", result));
  }
  if (const CUresult result = driver.primary_retain(&context, device); result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDevicePrimaryCtxRetain", result));
  }
  if (const CUresult result = driver.set_current(context); result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuCtxSetCurrent", result));
  }

  Descriptors descriptors(cudnn);
  if (Status status = descriptors.Build(c); !status.ok()) {
    return status.Prefixed(fmt::format("rebuilding op {}", op.sequence));
  }
  std::vector<DeviceBuffer> buffers;
  for (uint64_t size : sizes) {
    StatusOr<DeviceBuffer> buffer = Allocate(driver, size);
    if (!buffer.ok()) return buffer.status();
    buffers.push_back(std::move(*buffer));
  }
  void* const pointers[3] = {buffers[0].pointer(), buffers[1].pointer(), buffers[2].pointer()};

  OpReplayReport report;
  report.problem = c.fingerprint;
  report.output_role = c.roles[c.output];
  report.output_bytes = sizes[c.output];
  const int repeat = std::max(1, options.repeat);

  // K runs of `algo`; a failure to run it is returned for the recorded algorithm only.
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
    std::set<std::pair<uint64_t, uint64_t>> distinct;
    std::string first, output(sizes[c.output], '\0');
    std::optional<kernels::Digest128> recorded_digest;
    if (recorded_output) {
      recorded_digest = kernels::DigestV1(recorded_output->data(), recorded_output->size());
      runs.runs_matching_recorded = 0;
    }
    double total_ms = 0;
    for (int run = 0; run < repeat; ++run) {
      for (int i = 0; i < 3; ++i) {
        if (const CUresult result =
                driver.copy_to_device(buffers[i].address(), inputs[i].data(), inputs[i].size());
            result != CUDA_SUCCESS) {
          return Status::Error(driver.Error("cuMemcpyHtoD", result));
        }
      }
      const auto start = std::chrono::steady_clock::now();
      const cudnnStatus_t status = descriptors.Run(
          c, algo, pointers, *workspace_bytes == 0 ? nullptr : workspace->pointer(),
          *workspace_bytes);
      const CUresult synchronized = driver.synchronize();
      total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                            start)
                      .count();
      if (status != CUDNN_STATUS_SUCCESS) {
        const std::string why = cudnn.Error(op.name.c_str(), status);
        if (recorded) return Status::Error(why);
        runs.skipped = why;
        return runs;
      }
      if (synchronized != CUDA_SUCCESS) {
        return Status::Error(driver.Error("cuCtxSynchronize", synchronized));
      }
      if (const CUresult result =
              driver.copy_to_host(output.data(), buffers[c.output].address(), output.size());
          result != CUDA_SUCCESS) {
        return Status::Error(driver.Error("cuMemcpyDtoH", result));
      }
      const kernels::Digest128 digest = kernels::DigestV1(output.data(), output.size());
      distinct.insert({digest.lo, digest.hi});
      if (recorded_digest && digest == *recorded_digest) ++runs.runs_matching_recorded;
      if (run == 0) {
        first = output;
        runs.first_output = digest;
      } else {
        CompareValues(c.dtype, first, output, &runs);
      }
      ++runs.runs;
    }
    if (repeat == 1) CompareValues(c.dtype, first, first, &runs);
    runs.distinct_outputs = static_cast<int>(distinct.size());
    runs.ms_per_call = total_ms / runs.runs;
    return runs;
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

#else  // no CUDA headers at build time

StatusOr<MachineFacts> QueryMachine(uint32_t) {
  return Status::Error("this ndtrace was built without the CUDA headers: it cannot replay ops");
}

StatusOr<OpReplayReport> ReplayOp(format::TraceReader&, const format::OpRecord&,
                                  const OpReplayOptions&) {
  return Status::Error("this ndtrace was built without the CUDA headers: it cannot replay ops");
}

#endif

}  // namespace ndt::replay
