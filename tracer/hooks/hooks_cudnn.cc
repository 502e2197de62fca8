// The cuDNN legacy convolution hooks: cudnnConvolutionForward / BackwardData / BackwardFilter
// become kCudnnConvolution ops with their problem, the algorithm that ran and digests of their
// exact extents; cudnnFind*Algorithm[Ex] and cudnnGet*Algorithm_v7 become kOther ops with the
// list the library returned. The policy acts here (policy.h):
//   enforce  a nondeterministic algorithm requested in a convolution call is replaced by the
//            first deterministic one that fits the call's workspace; Find/Get_v7 results lose
//            their nondeterministic entries (the array is compacted, the count fixed), and Find
//            results are ranked by cuDNN's heuristic instead of by measured time;
//   pin      the algorithm recorded for the same fingerprint in the reference trace replaces
//            the program's choice, and is moved to the front of Find/Get_v7 results;
// each with a PolicyDecisionRecord. When a decision cannot be applied (no deterministic
// algorithm fits, another cuDNN or GPU, too little workspace) it is recorded unapplied, said
// once on stderr, and the program's own choice runs.
//
// Descriptors are shadowed: the Set*/Destroy* hooks keep each descriptor's shape in a
// mutex-guarded map, so a convolution call costs no extra library call; a descriptor set
// before we saw it is read back through the real cudnnGet*Descriptor.
#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "libfacts/cudnn_conv.h"
#include "tracer/capture.h"
#include "tracer/cudnn_types.h"
#include "tracer/library_support.h"
#include "tracer/policy.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {

constexpr const char* kCudnn = kCudnnSoname;

// ---- descriptor shadows ------------------------------------------------------------------

struct TensorShape {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::array<int, 4> dims{};     // n, c, h, w
  std::array<int, 4> strides{};  // elements
};

struct FilterShape {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  std::array<int, 4> dims{};  // k, c, r, s
};

struct ConvShape {
  std::array<int, 2> pad{};
  std::array<int, 2> stride{1, 1};
  std::array<int, 2> dilation{1, 1};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  int groups = 1;
};

// The shapes of live descriptors, and what this process's last Find/Get_v7 returned first per
// fingerprint. Never destroyed (hooks may run during exit). Any thread.
class CudnnShadows {
 public:
  static CudnnShadows& Get() {
    static auto* shadows = new CudnnShadows();
    return *shadows;
  }

  void SetTensor(const void* desc, const TensorShape& shape) {
    std::lock_guard lock(mutex_);
    tensors_[desc] = shape;
  }
  void SetFilter(const void* desc, const FilterShape& shape) {
    std::lock_guard lock(mutex_);
    filters_[desc] = shape;
  }
  // Applies `update` to the shadow of `desc` (a default shape when there is none yet).
  template <typename Update>
  void UpdateConv(const void* desc, Update update) {
    std::lock_guard lock(mutex_);
    update(convs_[desc]);
  }
  void Forget(const void* desc) {
    std::lock_guard lock(mutex_);
    tensors_.erase(desc);
    filters_.erase(desc);
    convs_.erase(desc);
  }

  std::optional<TensorShape> Tensor(cudnnTensorDescriptor_t desc);
  std::optional<FilterShape> Filter(cudnnFilterDescriptor_t desc);
  std::optional<ConvShape> Conv(cudnnConvolutionDescriptor_t desc);

  // `benchmark`: a Find, else a Get_v7.
  void NoteFirst(const std::string& fingerprint, bool benchmark, int algo) {
    std::lock_guard lock(mutex_);
    (benchmark ? find_first_ : heuristic_first_)[fingerprint] = algo;
  }
  format::ChoiceSource SourceOf(const std::string& fingerprint, int algo) {
    std::lock_guard lock(mutex_);
    if (auto it = find_first_.find(fingerprint); it != find_first_.end() && it->second == algo) {
      return format::ChoiceSource::kBenchmark;
    }
    if (auto it = heuristic_first_.find(fingerprint);
        it != heuristic_first_.end() && it->second == algo) {
      return format::ChoiceSource::kHeuristic;
    }
    return format::ChoiceSource::kRequested;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const void*, TensorShape> tensors_;
  std::unordered_map<const void*, FilterShape> filters_;
  std::unordered_map<const void*, ConvShape> convs_;
  std::map<std::string, int> find_first_;
  std::map<std::string, int> heuristic_first_;
};

std::optional<TensorShape> CudnnShadows::Tensor(cudnnTensorDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (auto it = tensors_.find(desc); it != tensors_.end()) return it->second;
  }
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetTensor4dDescriptor);
  TensorShape shape;
  if (get == nullptr || get(desc, &shape.dtype, &shape.dims[0], &shape.dims[1], &shape.dims[2],
                            &shape.dims[3], &shape.strides[0], &shape.strides[1], &shape.strides[2],
                            &shape.strides[3]) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return shape;
}

std::optional<FilterShape> CudnnShadows::Filter(cudnnFilterDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (auto it = filters_.find(desc); it != filters_.end()) return it->second;
  }
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetFilter4dDescriptor);
  FilterShape shape;
  if (get == nullptr || get(desc, &shape.dtype, &shape.format, &shape.dims[0], &shape.dims[1],
                            &shape.dims[2], &shape.dims[3]) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return shape;
}

std::optional<ConvShape> CudnnShadows::Conv(cudnnConvolutionDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (auto it = convs_.find(desc); it != convs_.end()) return it->second;
  }
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolution2dDescriptor);
  ConvShape shape;
  if (get == nullptr || get(desc, &shape.pad[0], &shape.pad[1], &shape.stride[0], &shape.stride[1],
                            &shape.dilation[0], &shape.dilation[1], &shape.mode,
                            &shape.compute) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  if (const auto math = NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionMathType)) {
    math(desc, &shape.math);
  }
  return shape;
}

// ---- names and facts of the algorithms ----------------------------------------------------

// The values of libfacts::ConvDirection.
enum class Direction { kForward, kBackwardData, kBackwardFilter };

const char* DirectionName(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return "forward";
    case Direction::kBackwardData:
      return "bwd-data";
    case Direction::kBackwardFilter:
      return "bwd-filter";
  }
  return "?";
}

std::string AlgoName(Direction direction, int64_t algo) {
  return libfacts::ConvAlgoName(static_cast<libfacts::ConvDirection>(direction), algo);
}

format::Determinism AlgoDeterminism(Direction direction, int64_t algo) {
  return libfacts::ConvAlgoNondeterministic(static_cast<libfacts::ConvDirection>(direction), algo)
             ? format::Determinism::kNondeterministic
             : format::Determinism::kDeterministic;
}

// The deterministic algorithms enforcement may substitute, best first.
std::vector<int> DeterministicPreference(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM};
    case Direction::kBackwardData:
      return {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT};
    case Direction::kBackwardFilter:
      return {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT};
  }
  return {};
}

format::AlgorithmChoice Choice(Direction direction, int64_t algo, format::ChoiceSource source) {
  format::AlgorithmChoice choice;
  choice.library = "cudnn";
  choice.id = algo;
  choice.name = AlgoName(direction, algo);
  choice.determinism = AlgoDeterminism(direction, algo);
  choice.source = source;
  return choice;
}

uint64_t ElementBytes(cudnnDataType_t dtype) {
  return format::DTypeBytes(CudnnDType(dtype));
}

std::string Joined(const int* values, size_t count, char separator) {
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) text += separator;
    text += std::to_string(values[i]);
  }
  return text;
}

// ---- one convolution problem ----------------------------------------------------------------

// The descriptors of a convolution call or query. `y` is the forward output (dy backwards),
// `x` the forward input (dx for backward data).
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
};

struct Problem {
  TensorShape x;
  FilterShape w;
  ConvShape conv;
  TensorShape y;
};

std::optional<Problem> Describe(const ConvDescriptors& d) {
  CudnnShadows& shadows = CudnnShadows::Get();
  std::optional<TensorShape> x = shadows.Tensor(d.x);
  std::optional<FilterShape> w = shadows.Filter(d.w);
  std::optional<ConvShape> conv = shadows.Conv(d.conv);
  std::optional<TensorShape> y = shadows.Tensor(d.y);
  if (!x || !w || !conv || !y) return std::nullopt;
  return Problem{*x, *w, *conv, *y};
}

// The canonical description of the problem: shapes, strides, dtypes, parameters; never
// pointers. Equal problems in two processes have equal fingerprints.
std::string Fingerprint(Direction direction, const Problem& p) {
  const auto tensor = [](const TensorShape& t) {
    return Joined(t.dims.data(), 4, 'x') + "/" + Joined(t.strides.data(), 4, ',') + " " +
           CudnnDTypeText(t.dtype);
  };
  std::string text = std::string("cudnn conv2d ") + DirectionName(direction);
  text += " x=" + tensor(p.x);
  text += " w=" + Joined(p.w.dims.data(), 4, 'x') + " " + CudnnDTypeText(p.w.dtype) +
          (p.w.format == CUDNN_TENSOR_NCHW ? " nchw" : " format" + std::to_string(p.w.format));
  text += " y=" + tensor(p.y);
  text += " pad=" + Joined(p.conv.pad.data(), 2, ',');
  text += " stride=" + Joined(p.conv.stride.data(), 2, ',');
  text += " dilation=" + Joined(p.conv.dilation.data(), 2, ',');
  text += p.conv.mode == CUDNN_CONVOLUTION ? " mode=convolution" : " mode=cross_correlation";
  text += " compute=" + CudnnDTypeText(p.conv.compute);
  text += " math=" + std::to_string(p.conv.math);
  text += " groups=" + std::to_string(p.conv.groups);
  return text;
}

uint64_t TensorBytes(const TensorShape& t) {
  return CudnnTensorBytes(t.dtype, t.dims.data(), t.strides.data(), 4);
}

uint64_t FilterBytes(const FilterShape& w) {
  uint64_t count = 1;
  for (int dim : w.dims) {
    if (dim <= 0) return 0;
    count *= static_cast<uint64_t>(dim);
  }
  return count * ElementBytes(w.dtype);
}

uint64_t Address(const void* pointer) {
  return reinterpret_cast<uint64_t>(pointer);
}

// The workspace the real library says `algo` needs for this problem; nullopt when it does not
// support it.
std::optional<size_t> WorkspaceFor(cudnnHandle_t handle, Direction direction,
                                   const ConvDescriptors& d, int algo) {
  size_t bytes = 0;
  cudnnStatus_t status = CUDNN_STATUS_NOT_INITIALIZED;
  switch (direction) {
    case Direction::kForward:
      if (const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionForwardWorkspaceSize)) {
        status = real(handle, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                      &bytes);
      }
      break;
    case Direction::kBackwardData:
      if (const auto real =
              NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionBackwardDataWorkspaceSize)) {
        status = real(handle, d.w, d.y, d.conv, d.x,
                      static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      }
      break;
    case Direction::kBackwardFilter:
      if (const auto real =
              NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionBackwardFilterWorkspaceSize)) {
        status = real(handle, d.x, d.y, d.conv, d.w,
                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      }
      break;
  }
  if (status != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return bytes;
}

// A host scaling factor (alpha, beta): double for double compute, float otherwise.
double Scale(const void* value, const std::optional<Problem>& problem) {
  if (value == nullptr) return 0;
  if (problem && problem->conv.compute == CUDNN_DATA_DOUBLE) {
    double scale;
    std::memcpy(&scale, value, sizeof scale);
    return scale;
  }
  float scale;
  std::memcpy(&scale, value, sizeof scale);
  return scale;
}

void AddProblemArguments(const std::string& fingerprint, const std::optional<Problem>& problem,
                         std::vector<format::Argument>* args) {
  args->push_back(TextArgument("fingerprint", fingerprint));
  if (!problem) return;
  const auto dims = [](const auto& values) {
    return std::vector<int64_t>(values.begin(), values.end());
  };
  args->push_back(DimsArgument("x_dims", dims(problem->x.dims)));
  args->push_back(DimsArgument("x_strides", dims(problem->x.strides)));
  args->push_back(DimsArgument("w_dims", dims(problem->w.dims)));
  args->push_back(DimsArgument("y_dims", dims(problem->y.dims)));
  args->push_back(DimsArgument("y_strides", dims(problem->y.strides)));
  args->push_back(TextArgument("dtype", CudnnDTypeText(problem->x.dtype)));
  args->push_back(DimsArgument("pad", dims(problem->conv.pad)));
  args->push_back(DimsArgument("stride", dims(problem->conv.stride)));
  args->push_back(DimsArgument("dilation", dims(problem->conv.dilation)));
  args->push_back(TextArgument(
      "mode", problem->conv.mode == CUDNN_CONVOLUTION ? "convolution" : "cross_correlation"));
  args->push_back(TextArgument("compute", CudnnDTypeText(problem->conv.compute)));
  args->push_back(UnsignedArgument("math", static_cast<uint64_t>(problem->conv.math)));
}

// ---- the policy at a convolution call ------------------------------------------------------

struct ConvCall {
  Direction direction = Direction::kForward;
  cudnnHandle_t handle = nullptr;
  ConvDescriptors d;
  int algo = 0;  // requested by the program
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

bool Fits(const ConvCall& call, size_t needed) {
  return needed <= call.workspace_bytes && (needed == 0 || call.workspace != nullptr);
}

// The algorithm to run: the program's, or the policy's replacement (with its decision).
format::AlgorithmChoice Choose(Session& session, uint64_t sequence, const ConvCall& call,
                               const std::string& fingerprint) {
  const Direction direction = call.direction;
  format::AlgorithmChoice requested =
      Choice(direction, call.algo,
             fingerprint.empty() ? format::ChoiceSource::kRequested
                                 : CudnnShadows::Get().SourceOf(fingerprint, call.algo));
  const std::string what = std::string(DirectionName(direction)) + " algo ";
  format::PolicyDecisionRecord decision;
  decision.op_sequence = sequence;
  decision.library = "cudnn";
  decision.from_choice = requested;

  if (session.policy().mode == PolicyMode::kEnforce) {
    if (requested.determinism != format::Determinism::kNondeterministic) return requested;
    for (int candidate : DeterministicPreference(direction)) {
      const std::optional<size_t> needed = WorkspaceFor(call.handle, direction, call.d, candidate);
      if (!needed || !Fits(call, *needed)) continue;
      format::AlgorithmChoice replacement =
          Choice(direction, candidate, format::ChoiceSource::kEnforced);
      decision.action = "replaced " + what + std::to_string(call.algo) + " (nondeterministic) by " +
                        std::to_string(candidate) + " (" + replacement.name + ")";
      decision.to_choice = replacement;
      session.Decide(decision);
      return replacement;
    }
    decision.action = "cannot replace " + what + std::to_string(call.algo) + " (" + requested.name +
                      ", nondeterministic): no deterministic algorithm fits " +
                      "the workspace of " + std::to_string(call.workspace_bytes) + " bytes";
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }

  if (session.policy().mode != PolicyMode::kPin || session.pins() == nullptr) return requested;
  if (fingerprint.empty()) {
    decision.action = "cannot pin a cuDNN " + std::string(DirectionName(direction)) +
                      " convolution whose descriptors are unknown";
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  const format::AlgorithmChoice* pinned = session.pins()->Choice(fingerprint);
  if (pinned == nullptr || pinned->library != "cudnn") {
    decision.action = "no cuDNN choice recorded in the pin trace for " + fingerprint;
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  if (std::string mismatch = session.pins()->Mismatch(session.header(), "cudnn");
      !mismatch.empty()) {
    decision.action = "cannot pin cuDNN algorithms: " + mismatch;
    decision.to_choice = Choice(direction, pinned->id, format::ChoiceSource::kPinned);
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  format::AlgorithmChoice chosen = Choice(direction, pinned->id, format::ChoiceSource::kPinned);
  if (pinned->id == call.algo) return chosen;
  const std::optional<size_t> needed =
      WorkspaceFor(call.handle, direction, call.d, static_cast<int>(pinned->id));
  decision.to_choice = chosen;
  if (!needed || !Fits(call, *needed)) {
    decision.action =
        "cannot pin " + what + std::to_string(pinned->id) + " (" + chosen.name + "): " +
        (needed ? "it needs " + std::to_string(*needed) + " bytes of workspace, the program gave " +
                      std::to_string(call.workspace_bytes)
                : std::string("the library does not support it for this problem"));
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  decision.action = "replaced " + what + std::to_string(call.algo) + " by pinned " +
                    std::to_string(pinned->id) + " (" + chosen.name + ")";
  session.Decide(decision);
  return chosen;
}

// Records one convolution call around `real(algo)`.
template <typename Real>
cudnnStatus_t RecordConvolution(Session& session, RealCall<cudnnStatus_t>& call, const char* name,
                                const ConvCall& conv, const void* alpha, const void* beta,
                                const void* x, const void* w, const void* y, Real real) {
  const std::optional<Problem> problem = Describe(conv.d);
  const std::string fingerprint = problem ? Fingerprint(conv.direction, *problem) : "";
  const uint64_t stream = CudnnHandleStream(conv.handle);
  format::OpRecord op =
      session.BeginOp(format::OpKind::kCudnnConvolution, name, session.StreamId(stream, false));
  AddProblemArguments(fingerprint, problem, &op.args);
  // Roles: forward reads x, w and writes y; backward data reads dy, w and writes dx; backward
  // filter reads x, dy and writes dw. The output is also read when beta != 0.
  static constexpr const char* kRoles[3][3] = {
      {"x", "w", "y"}, {"dx", "w", "dy"}, {"x", "dw", "dy"}};
  const char* const* roles = kRoles[static_cast<int>(conv.direction)];
  op.args.push_back(PointerArgument(session, roles[0], Address(x)));
  op.args.push_back(PointerArgument(session, roles[1], Address(w)));
  op.args.push_back(PointerArgument(session, roles[2], Address(y)));
  const double beta_value = Scale(beta, problem);
  op.args.push_back(DoubleArgument("alpha", Scale(alpha, problem)));
  op.args.push_back(DoubleArgument("beta", beta_value));
  op.args.push_back(UnsignedArgument("workspace_bytes", conv.workspace_bytes));

  format::AlgorithmChoice chosen = Choose(session, op.sequence, conv, fingerprint);
  op.algorithm = chosen;

  std::vector<Extent> inputs, outputs;
  if (problem) {
    const Extent ex{roles[0], Address(x), TensorBytes(problem->x), CudnnDType(problem->x.dtype)};
    const Extent ew{roles[1], Address(w), FilterBytes(problem->w), CudnnDType(problem->w.dtype)};
    const Extent ey{roles[2], Address(y), TensorBytes(problem->y), CudnnDType(problem->y.dtype)};
    switch (conv.direction) {
      case Direction::kForward:
        inputs = {ex, ew};
        outputs = {ey};
        break;
      case Direction::kBackwardData:
        inputs = {ey, ew};
        outputs = {ex};
        break;
      case Direction::kBackwardFilter:
        inputs = {ex, ey};
        outputs = {ew};
        break;
    }
    if (beta_value != 0) inputs.push_back(outputs.front());
  }
  op.inputs = DigestExtents(session, stream, inputs);
  const bool capture = CaptureWanted(op);
  if (capture) CaptureExtents(session, stream, inputs, "in", &op);
  const cudnnStatus_t status = call.Run([&] { return real(static_cast<int>(chosen.id)); });
  if (status == CUDNN_STATUS_SUCCESS) op.outputs = DigestExtents(session, stream, outputs);
  if (capture && status == CUDNN_STATUS_SUCCESS) {
    CaptureExtents(session, stream, outputs, "out", &op);
  }
  session.EndOp(op, static_cast<int32_t>(status));
  return status;
}

// ---- Find / Get_v7 ----------------------------------------------------------------------------

// cuDNN's heuristic order of the algorithms for `d` (the real cudnnGet*Algorithm_v7, not
// recorded), or empty when the library does not say.
template <typename Perf>
std::vector<int> HeuristicOrder(cudnnHandle_t handle, const ConvDescriptors& d) {
  Perf perf[16];
  int returned = 0;
  cudnnStatus_t status = CUDNN_STATUS_NOT_INITIALIZED;
  if constexpr (std::is_same_v<Perf, cudnnConvolutionFwdAlgoPerf_t>) {
    if (const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionForwardAlgorithm_v7)) {
      status = get(handle, d.x, d.w, d.conv, d.y, 16, &returned, perf);
    }
  } else if constexpr (std::is_same_v<Perf, cudnnConvolutionBwdDataAlgoPerf_t>) {
    if (const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionBackwardDataAlgorithm_v7)) {
      status = get(handle, d.w, d.y, d.conv, d.x, 16, &returned, perf);
    }
  } else {
    if (const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetConvolutionBackwardFilterAlgorithm_v7)) {
      status = get(handle, d.x, d.y, d.conv, d.w, 16, &returned, perf);
    }
  }
  std::vector<int> order;
  if (status != CUDNN_STATUS_SUCCESS) return order;
  for (int i = 0; i < std::min(returned, 16); ++i) order.push_back(static_cast<int>(perf[i].algo));
  return order;
}

// The first algorithm of `list` that ran, or -1.
template <typename Perf>
int FirstUsable(const std::vector<Perf>& list) {
  for (const Perf& perf : list) {
    if (perf.status == CUDNN_STATUS_SUCCESS) return static_cast<int>(perf.algo);
  }
  return -1;
}

// Records a Find (`benchmark`) or Get_v7 query around `real()`, and applies the policy to the
// list it returned.
template <typename Perf, typename Real>
cudnnStatus_t RecordQuery(Session& session, RealCall<cudnnStatus_t>& call, const char* name,
                          Direction direction, bool benchmark, cudnnHandle_t handle,
                          const ConvDescriptors& d, int requested, int* returned, Perf* results,
                          Real real) {
  const std::optional<Problem> problem = Describe(d);
  const std::string fingerprint = problem ? Fingerprint(direction, *problem) : "";
  const uint64_t stream = CudnnHandleStream(handle);
  format::OpRecord op =
      session.BeginOp(format::OpKind::kOther, name, session.StreamId(stream, false));
  AddProblemArguments(fingerprint, problem, &op.args);
  op.args.push_back(SignedArgument("requested_count", requested));
  const cudnnStatus_t status = call.Run(real);
  if (status != CUDNN_STATUS_SUCCESS || returned == nullptr || results == nullptr ||
      *returned < 0) {
    session.EndOp(op, static_cast<int32_t>(status));
    return status;
  }
  std::vector<Perf> list(results, results + std::min(*returned, std::max(requested, 0)));
  const std::string what = std::string(DirectionName(direction)) + " algo";
  format::PolicyDecisionRecord decision;
  decision.op_sequence = op.sequence;
  decision.library = "cudnn";

  if (session.policy().mode == PolicyMode::kEnforce) {
    std::string removed;
    std::vector<Perf> kept;
    for (const Perf& perf : list) {
      const bool nondeterministic =
          perf.determinism == CUDNN_NON_DETERMINISTIC ||
          AlgoDeterminism(direction, perf.algo) == format::Determinism::kNondeterministic;
      if (!nondeterministic) {
        kept.push_back(perf);
        continue;
      }
      removed += (removed.empty() ? "" : ", ") + std::to_string(perf.algo);
    }
    if (!removed.empty()) {
      list = std::move(kept);
      decision.action = std::string("removed nondeterministic ") + what + " " + removed +
                        " from the " + name + " results";
      session.Decide(decision);
    }
    // Deterministic algorithms still differ from one another in their results, and a Find
    // ranks them by measured time, which varies from run to run: the program would pick
    // another one now and then. Ranked by cuDNN's heuristic instead, the pick is the same in
    // every run (what cudnn.benchmark=False would choose, among those that ran).
    const std::vector<int> order = benchmark ? HeuristicOrder<Perf>(handle, d) : std::vector<int>();
    if (!order.empty()) {
      const auto rank = [&](const Perf& perf) {
        if (perf.status != CUDNN_STATUS_SUCCESS) return order.size() + 1;
        const auto found = std::find(order.begin(), order.end(), static_cast<int>(perf.algo));
        return static_cast<size_t>(found - order.begin());
      };
      const int timed_first = FirstUsable(list);
      std::stable_sort(list.begin(), list.end(),
                       [&](const Perf& a, const Perf& b) { return rank(a) < rank(b); });
      const int first = FirstUsable(list);
      if (first >= 0) {
        format::PolicyDecisionRecord ordered = decision;
        ordered.to_choice = Choice(direction, first, format::ChoiceSource::kEnforced);
        ordered.action = "ranked the " + std::string(name) + " results by cuDNN's heuristic, " +
                         "not by measured time: first " + what + " " + std::to_string(first) +
                         (first == timed_first
                              ? " (also the fastest this time)"
                              : " (the fastest this time was " + std::to_string(timed_first) + ")");
        session.Decide(ordered);
      }
    }
  } else if (session.policy().mode == PolicyMode::kPin && session.pins() != nullptr &&
             !fingerprint.empty()) {
    const format::AlgorithmChoice* pinned = session.pins()->Choice(fingerprint);
    if (pinned != nullptr && pinned->library == "cudnn") {
      decision.to_choice = Choice(direction, pinned->id, format::ChoiceSource::kPinned);
      const std::string mismatch = session.pins()->Mismatch(session.header(), "cudnn");
      auto it = std::find_if(list.begin(), list.end(), [&](const Perf& perf) {
        return perf.algo == pinned->id && perf.status == CUDNN_STATUS_SUCCESS;
      });
      if (!mismatch.empty()) {
        decision.action = "cannot pin cuDNN algorithms: " + mismatch;
        decision.applied = false;
      } else if (it == list.end()) {
        decision.action = "cannot pin " + what + " " + std::to_string(pinned->id) + " (" +
                          decision.to_choice->name + "): " + name + " did not return it";
        decision.applied = false;
      } else {
        std::rotate(list.begin(), it, it + 1);
        decision.action = "moved pinned " + what + " " + std::to_string(pinned->id) + " (" +
                          decision.to_choice->name + ") to the front of the " + name + " results";
      }
      session.Decide(decision);
    }
  }
  std::copy(list.begin(), list.end(), results);
  *returned = static_cast<int>(list.size());

  // What the program now sees: the algorithms by id (a fact of the problem), the first usable
  // one (what a framework takes); the times, which vary run to run, go to a note.
  std::vector<Perf> by_id = list;
  std::sort(by_id.begin(), by_id.end(),
            [](const Perf& a, const Perf& b) { return a.algo < b.algo; });
  std::string algorithms, times;
  for (const Perf& perf : by_id) {
    if (!algorithms.empty()) algorithms += "; ";
    algorithms += AlgoName(direction, perf.algo);
    if (perf.status != CUDNN_STATUS_SUCCESS) {
      algorithms += " status " + std::to_string(perf.status);
      continue;
    }
    algorithms +=
        perf.determinism == CUDNN_NON_DETERMINISTIC ? " nondeterministic" : " deterministic";
    algorithms += " " + std::to_string(perf.memory) + " B";
  }
  int first = -1;
  for (const Perf& perf : list) {
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    if (first < 0) first = static_cast<int>(perf.algo);
    if (!times.empty()) times += ", ";
    char time[32];
    std::snprintf(time, sizeof time, "%.3f ms", static_cast<double>(perf.time));
    times += AlgoName(direction, perf.algo) + " " + time;
  }
  op.args.push_back(SignedArgument("returned_count", *returned));
  op.args.push_back(TextArgument("algorithms", algorithms));
  op.args.push_back(TextArgument("first", first >= 0 ? AlgoName(direction, first) : ""));
  if (first >= 0 && !fingerprint.empty()) {
    CudnnShadows::Get().NoteFirst(fingerprint, benchmark, first);
  }
  session.EndOp(op, static_cast<int32_t>(status));
  if (benchmark) {
    format::TracerNote note;
    note.severity = format::Severity::kInfo;
    note.text = std::string(name) + " (op " + std::to_string(op.sequence) + ") timings: " + times;
    note.before_op = session.PeekOpSequence();
    note.time_ns = session.NowNs();
    session.Append(note);
  }
  return status;
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::CudnnShadows;
using ndt::tracer::kCudnn;
using ndt::tracer::RealCall;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;

extern "C" {

// ---- descriptor shadows ----

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dtype, int n, int c, int h, int w) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetTensor4dDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status = real(desc, format, dtype, n, c, h, w);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] {
      ndt::tracer::TensorShape shape;
      shape.dtype = dtype;
      shape.dims = {n, c, h, w};
      shape.strides = format == CUDNN_TENSOR_NHWC ? std::array<int, 4>{c * h * w, 1, w * c, c}
                                                  : std::array<int, 4>{c * h * w, h * w, w, 1};
      if (format == CUDNN_TENSOR_NCHW || format == CUDNN_TENSOR_NHWC) {
        CudnnShadows::Get().SetTensor(desc, shape);
      } else {
        CudnnShadows::Get().Forget(desc);  // read back through the library when needed
      }
    });
  }
  return status;
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t desc, cudnnDataType_t dtype,
                                           int n, int c, int h, int w, int n_stride, int c_stride,
                                           int h_stride, int w_stride) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetTensor4dDescriptorEx);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status =
      real(desc, dtype, n, c, h, w, n_stride, c_stride, h_stride, w_stride);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] {
      ndt::tracer::TensorShape shape;
      shape.dtype = dtype;
      shape.dims = {n, c, h, w};
      shape.strides = {n_stride, c_stride, h_stride, w_stride};
      CudnnShadows::Get().SetTensor(desc, shape);
    });
  }
  return status;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyTensorDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] { CudnnShadows::Get().Forget(desc); });
  return real(desc);
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t dtype,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetFilter4dDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status = real(desc, dtype, format, k, c, h, w);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] {
      ndt::tracer::FilterShape shape;
      shape.dtype = dtype;
      shape.format = format;
      shape.dims = {k, c, h, w};
      CudnnShadows::Get().SetFilter(desc, shape);
    });
  }
  return status;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyFilterDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] { CudnnShadows::Get().Forget(desc); });
  return real(desc);
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetConvolution2dDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status =
      real(desc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] {
      CudnnShadows::Get().UpdateConv(desc, [&](ndt::tracer::ConvShape& shape) {
        shape.pad = {pad_h, pad_w};
        shape.stride = {u, v};
        shape.dilation = {dilation_h, dilation_w};
        shape.mode = mode;
        shape.compute = compute;
      });
    });
  }
  return status;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetConvolutionMathType);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status = real(desc, math);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] {
      CudnnShadows::Get().UpdateConv(desc,
                                     [&](ndt::tracer::ConvShape& shape) { shape.math = math; });
    });
  }
  return status;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetConvolutionGroupCount);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status = real(desc, groups);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] {
      CudnnShadows::Get().UpdateConv(desc,
                                     [&](ndt::tracer::ConvShape& shape) { shape.groups = groups; });
    });
  }
  return status;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyConvolutionDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ndt::tracer::ShadowSafely("cudnn descriptor shadow", [&] { CudnnShadows::Get().Forget(desc); });
  return real(desc);
}

// ---- algorithm queries ----

#define NDT_CUDNN_QUERY(hook, Perf, direction, benchmark, descriptors, ...)                       \
  const auto real = NDT_REAL_LIBRARY(kCudnn, hook);                                               \
  const auto call_real = [&] { return real(__VA_ARGS__); };                                       \
  return RunLibraryHook<cudnnStatus_t>(                                                           \
      #hook, real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, call_real,                            \
      [&](Session& session, RealCall<cudnnStatus_t>& call) {                                      \
        return ndt::tracer::RecordQuery<Perf>(session, call, #hook, direction, benchmark, handle, \
                                              descriptors, requested, returned, results,          \
                                              call_real);                                         \
      })

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  NDT_CUDNN_QUERY(cudnnFindConvolutionForwardAlgorithm, cudnnConvolutionFwdAlgoPerf_t,
                  ndt::tracer::Direction::kForward, true,
                  (ndt::tracer::ConvDescriptors{x, w, conv, y}), handle, x, w, conv, y, requested,
                  returned, results);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  NDT_CUDNN_QUERY(cudnnFindConvolutionBackwardDataAlgorithm, cudnnConvolutionBwdDataAlgoPerf_t,
                  ndt::tracer::Direction::kBackwardData, true,
                  (ndt::tracer::ConvDescriptors{dx, w, conv, dy}), handle, w, dy, conv, dx,
                  requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  NDT_CUDNN_QUERY(cudnnFindConvolutionBackwardFilterAlgorithm, cudnnConvolutionBwdFilterAlgoPerf_t,
                  ndt::tracer::Direction::kBackwardFilter, true,
                  (ndt::tracer::ConvDescriptors{x, dw, conv, dy}), handle, x, dy, conv, dw,
                  requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnFilterDescriptor_t w_desc, const void* w, const cudnnConvolutionDescriptor_t conv,
    const cudnnTensorDescriptor_t y_desc, void* y, const int requested, int* returned,
    cudnnConvolutionFwdAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  NDT_CUDNN_QUERY(cudnnFindConvolutionForwardAlgorithmEx, cudnnConvolutionFwdAlgoPerf_t,
                  ndt::tracer::Direction::kForward, true,
                  (ndt::tracer::ConvDescriptors{x_desc, w_desc, conv, y_desc}), handle, x_desc, x,
                  w_desc, w, conv, y_desc, y, requested, returned, results, workspace,
                  workspace_bytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w_desc, const void* w,
    const cudnnTensorDescriptor_t dy_desc, const void* dy, const cudnnConvolutionDescriptor_t conv,
    const cudnnTensorDescriptor_t dx_desc, void* dx, const int requested, int* returned,
    cudnnConvolutionBwdDataAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  NDT_CUDNN_QUERY(cudnnFindConvolutionBackwardDataAlgorithmEx, cudnnConvolutionBwdDataAlgoPerf_t,
                  ndt::tracer::Direction::kBackwardData, true,
                  (ndt::tracer::ConvDescriptors{dx_desc, w_desc, conv, dy_desc}), handle, w_desc, w,
                  dy_desc, dy, conv, dx_desc, dx, requested, returned, results, workspace,
                  workspace_bytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnTensorDescriptor_t dy_desc, const void* dy, const cudnnConvolutionDescriptor_t conv,
    const cudnnFilterDescriptor_t dw_desc, void* dw, const int requested, int* returned,
    cudnnConvolutionBwdFilterAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  NDT_CUDNN_QUERY(cudnnFindConvolutionBackwardFilterAlgorithmEx,
                  cudnnConvolutionBwdFilterAlgoPerf_t, ndt::tracer::Direction::kBackwardFilter,
                  true, (ndt::tracer::ConvDescriptors{x_desc, dw_desc, conv, dy_desc}), handle,
                  x_desc, x, dy_desc, dy, conv, dw_desc, dw, requested, returned, results,
                  workspace, workspace_bytes);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  NDT_CUDNN_QUERY(cudnnGetConvolutionForwardAlgorithm_v7, cudnnConvolutionFwdAlgoPerf_t,
                  ndt::tracer::Direction::kForward, false,
                  (ndt::tracer::ConvDescriptors{x, w, conv, y}), handle, x, w, conv, y, requested,
                  returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  NDT_CUDNN_QUERY(cudnnGetConvolutionBackwardDataAlgorithm_v7, cudnnConvolutionBwdDataAlgoPerf_t,
                  ndt::tracer::Direction::kBackwardData, false,
                  (ndt::tracer::ConvDescriptors{dx, w, conv, dy}), handle, w, dy, conv, dx,
                  requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  NDT_CUDNN_QUERY(cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                  cudnnConvolutionBwdFilterAlgoPerf_t, ndt::tracer::Direction::kBackwardFilter,
                  false, (ndt::tracer::ConvDescriptors{x, dw, conv, dy}), handle, x, dy, conv, dw,
                  requested, returned, results);
}

#undef NDT_CUDNN_QUERY

// ---- the convolutions ----

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t x_desc, const void* x,
                                      const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnConvolutionForward);
  const auto run = [&](int chosen) {
    return real(handle, alpha, x_desc, x, w_desc, w, conv,
                static_cast<cudnnConvolutionFwdAlgo_t>(chosen), workspace, workspace_bytes, beta,
                y_desc, y);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnConvolutionForward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return run(algo); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        const ndt::tracer::ConvCall c{
            ndt::tracer::Direction::kForward, handle,    {x_desc, w_desc, conv, y_desc},
            static_cast<int>(algo),           workspace, workspace_bytes};
        return ndt::tracer::RecordConvolution(session, call, "cudnnConvolutionForward", c, alpha,
                                              beta, x, w, y, run);
      });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnConvolutionBackwardData);
  const auto run = [&](int chosen) {
    return real(handle, alpha, w_desc, w, dy_desc, dy, conv,
                static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen), workspace, workspace_bytes,
                beta, dx_desc, dx);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnConvolutionBackwardData", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return run(algo); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        const ndt::tracer::ConvCall c{ndt::tracer::Direction::kBackwardData,
                                      handle,
                                      {dx_desc, w_desc, conv, dy_desc},
                                      static_cast<int>(algo),
                                      workspace,
                                      workspace_bytes};
        return ndt::tracer::RecordConvolution(session, call, "cudnnConvolutionBackwardData", c,
                                              alpha, beta, dx, w, dy, run);
      });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnConvolutionBackwardFilter);
  const auto run = [&](int chosen) {
    return real(handle, alpha, x_desc, x, dy_desc, dy, conv,
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen), workspace, workspace_bytes,
                beta, dw_desc, dw);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnConvolutionBackwardFilter", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return run(algo); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        const ndt::tracer::ConvCall c{ndt::tracer::Direction::kBackwardFilter,
                                      handle,
                                      {x_desc, dw_desc, conv, dy_desc},
                                      static_cast<int>(algo),
                                      workspace,
                                      workspace_bytes};
        return ndt::tracer::RecordConvolution(session, call, "cudnnConvolutionBackwardFilter", c,
                                              alpha, beta, x, dw, dy, run);
      });
}

}  // extern "C"
