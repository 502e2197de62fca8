// The cuDNN RNN hooks (cuDNN 9's cudnn_adv API, as PyTorch's nn.LSTM / nn.GRU / nn.RNN call it)
// and the dropout descriptor's:
//   cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8
//       -> `other` ops on the handle's stream with the problem (cell mode, direction, layers,
//          sizes, dtypes, math type, dropout, sequence length, batch, layout), the algorithm in
//          the RNN descriptor as the op's AlgorithmChoice, digests of the exact extents (x, y,
//          hx, hy, cx, cy, dx, dy, dhx, dhy, dcx, dcy, the weight space and its gradient), the
//          reserve space's pointer and size; a training forward with dropout carries the dropout
//          RNG state (seed of its states buffer, uses so far) as its RngState;
//   cudnnSetRNNDescriptor_v8 (where the policy acts), cudnnGetRNNWeightSpaceSize,
//   cudnnGetRNNTempSpaceSizes -> `other` ops with the descriptor's fingerprint and the sizes;
//   cudnnDropoutGetStatesSize, cudnnSetDropoutDescriptor, cudnnRestoreDropoutDescriptor
//       -> `other` ops; Set and Restore carry the RngState {cudnn_dropout, seed, uses}.
// Descriptors are shadowed by their Set/Destroy hooks (mutex-guarded maps); an RNN or RNN data
// descriptor set before we saw it is read back through the real cudnnGet*Descriptor, and the
// hidden/cell state descriptors are always read back (cudnnGetTensorNdDescriptor): the 4-d
// shadows of hooks_cudnn.cc do not hold them.
//
// Policy, applied at cudnnSetRNNDescriptor_v8 so that the sizes the program then asks for match
// the algorithm that runs:
//   enforce  CUDNN_RNN_ALGO_PERSIST_* -> CUDNN_RNN_ALGO_STANDARD (libfacts/cudnn_rnn.h says why);
//            a program's CUBLAS_WORKSPACE_CONFIG with more than one buffer size is said once
//            (unapplied decision): cuDNN's documented cause of RNN nondeterminism;
//   pin      the algorithm the reference recorded for the descriptor's fingerprint; the seed
//            the reference gave cudnnSetDropoutDescriptor for the same fingerprint.
#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "libfacts/cudnn_rnn.h"
#include "tracer/capture.h"
#include "tracer/cudnn_types.h"
#include "tracer/library_support.h"
#include "tracer/policy.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {

constexpr const char* kCudnn = kCudnnSoname;
constexpr const char* kDropoutGenerator = "cudnn_dropout";

// ---- descriptor shadows ------------------------------------------------------------------

struct RnnShape {
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_STANDARD;  // what runs (after the policy)
  cudnnRNNAlgo_t requested_algo = CUDNN_RNN_ALGO_STANDARD;  // what the program asked for
  format::ChoiceSource source = format::ChoiceSource::kRequested;
  cudnnRNNMode_t mode = CUDNN_LSTM;
  cudnnRNNBiasMode_t bias = CUDNN_RNN_DOUBLE_BIAS;
  cudnnDirectionMode_t direction = CUDNN_UNIDIRECTIONAL;
  cudnnRNNInputMode_t input_mode = CUDNN_LINEAR_INPUT;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnDataType_t math_prec = CUDNN_DATA_FLOAT;
  cudnnMathType_t math_type = CUDNN_DEFAULT_MATH;
  int32_t input = 0, hidden = 0, proj = 0, layers = 0;
  cudnnDropoutDescriptor_t dropout = nullptr;
  uint32_t aux_flags = 0;
};

struct DataShape {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnRNNDataLayout_t layout = CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  int max_seq = 0, batch = 0, vector = 0;
  std::vector<int> lengths;
};

struct DropoutShape {
  float probability = 0;
  uint64_t states = 0;  // raw device address
  uint64_t states_bytes = 0;
  unsigned long long seed = 0;  // as given to Set/Restore
};

// What the tracer knows of a dropout states buffer: the seed cudnnSetDropoutDescriptor
// initialised it with and how many training forwards have consumed it since.
struct StatesUse {
  unsigned long long seed = 0;
  uint64_t uses = 0;
};

// Never destroyed (hooks may run during exit). Any thread.
class RnnShadows {
 public:
  static RnnShadows& Get() {
    static auto* shadows = new RnnShadows();
    return *shadows;
  }

  void SetRnn(const void* desc, const RnnShape& shape) {
    std::lock_guard lock(mutex_);
    rnns_[desc] = shape;
  }
  void SetData(const void* desc, DataShape shape) {
    std::lock_guard lock(mutex_);
    data_[desc] = std::move(shape);
  }
  void SetDropout(const void* desc, const DropoutShape& shape) {
    std::lock_guard lock(mutex_);
    dropouts_[desc] = shape;
  }
  void Forget(const void* desc) {
    std::lock_guard lock(mutex_);
    rnns_.erase(desc);
    data_.erase(desc);
    dropouts_.erase(desc);
  }

  std::optional<RnnShape> Rnn(cudnnRNNDescriptor_t desc);
  std::optional<DataShape> Data(cudnnRNNDataDescriptor_t desc);
  std::optional<DropoutShape> Dropout(cudnnDropoutDescriptor_t desc) {
    std::lock_guard lock(mutex_);
    if (auto it = dropouts_.find(desc); it != dropouts_.end()) return it->second;
    return std::nullopt;
  }

  // The states buffer at `states` was initialised from `seed`.
  void InitStates(uint64_t states, unsigned long long seed) {
    std::lock_guard lock(mutex_);
    states_[states] = StatesUse{seed, 0};
  }
  // What is known of the states buffer at `states`; with `consume`, one more use is counted
  // after the one returned.
  std::optional<StatesUse> States(uint64_t states, bool consume) {
    std::lock_guard lock(mutex_);
    auto it = states_.find(states);
    if (it == states_.end()) return std::nullopt;
    const StatesUse use = it->second;
    if (consume) ++it->second.uses;
    return use;
  }

  // True the first time only: the CUBLAS_WORKSPACE_CONFIG decision is made once per process.
  bool FirstWorkspaceCheck() {
    std::lock_guard lock(mutex_);
    return !std::exchange(workspace_checked_, true);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<const void*, RnnShape> rnns_;
  std::unordered_map<const void*, DataShape> data_;
  std::unordered_map<const void*, DropoutShape> dropouts_;
  std::map<uint64_t, StatesUse> states_;
  bool workspace_checked_ = false;
};

std::optional<RnnShape> RnnShadows::Rnn(cudnnRNNDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (auto it = rnns_.find(desc); it != rnns_.end()) return it->second;
  }
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetRNNDescriptor_v8);
  RnnShape s;
  if (get == nullptr || get(desc, &s.algo, &s.mode, &s.bias, &s.direction, &s.input_mode, &s.dtype,
                            &s.math_prec, &s.math_type, &s.input, &s.hidden, &s.proj, &s.layers,
                            &s.dropout, &s.aux_flags) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return s;
}

std::optional<DataShape> RnnShadows::Data(cudnnRNNDataDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    if (auto it = data_.find(desc); it != data_.end()) return it->second;
  }
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetRNNDataDescriptor);
  DataShape s;
  if (get == nullptr ||
      get(desc, &s.dtype, &s.layout, &s.max_seq, &s.batch, &s.vector, 0, nullptr, nullptr) !=
          CUDNN_STATUS_SUCCESS ||
      s.batch <= 0 || s.batch > (1 << 24)) {
    return std::nullopt;
  }
  s.lengths.resize(static_cast<size_t>(s.batch));
  if (get(desc, &s.dtype, &s.layout, &s.max_seq, &s.batch, &s.vector, s.batch, s.lengths.data(),
          nullptr) != CUDNN_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return s;
}

// A hidden or cell state tensor, read back from the real library.
struct StateTensor {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
};

std::optional<StateTensor> StateOf(cudnnTensorDescriptor_t desc) {
  if (desc == nullptr) return std::nullopt;
  const auto get = NDT_REAL_LIBRARY(kCudnn, cudnnGetTensorNdDescriptor);
  int dims[8] = {}, strides[8] = {}, count = 0;
  StateTensor t;
  if (get == nullptr || get(desc, 8, &t.dtype, &count, dims, strides) != CUDNN_STATUS_SUCCESS ||
      count <= 0 || count > 8) {
    return std::nullopt;
  }
  t.dims.assign(dims, dims + count);
  t.strides.assign(strides, strides + count);
  return t;
}

// ---- names and facts ----------------------------------------------------------------------

// The determinism ndtrace can state for an RNN algorithm: CUDNN_RNN_ALGO_STANDARD with one
// cuBLAS workspace size is deterministic as cuDNN's release notes describe it; nothing is
// documented of the others (libfacts/cudnn_rnn.h).
format::Determinism AlgoDeterminism(int64_t algo) {
  if (algo == libfacts::kRnnDeterministicAlgo &&
      libfacts::CublasWorkspaceHasOneSize(std::getenv("CUBLAS_WORKSPACE_CONFIG"))) {
    return format::Determinism::kDeterministic;
  }
  return format::Determinism::kUnknown;
}

format::AlgorithmChoice Choice(int64_t algo, format::ChoiceSource source) {
  format::AlgorithmChoice choice;
  choice.library = "cudnn";
  choice.id = algo;
  choice.name = libfacts::RnnAlgoName(algo);
  choice.determinism = AlgoDeterminism(algo);
  choice.source = source;
  return choice;
}

std::string Probability(float p) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(p));
  return text;
}

// The dropout probability the RNN descriptor refers to (0 without one).
float DropoutOf(const RnnShape& rnn) {
  if (rnn.dropout == nullptr) return 0;
  const std::optional<DropoutShape> dropout = RnnShadows::Get().Dropout(rnn.dropout);
  return dropout ? dropout->probability : 0;
}

// The RNN descriptor's canonical description: everything but the algorithm; never pointers.
std::string DescriptorFingerprint(const RnnShape& r) {
  return "cudnn rnn " + libfacts::RnnModeName(r.mode) + " " +
         libfacts::RnnDirectionName(r.direction) + " layers=" + std::to_string(r.layers) +
         " input=" + std::to_string(r.input) + " hidden=" + std::to_string(r.hidden) +
         " proj=" + std::to_string(r.proj) + " bias=" + libfacts::RnnBiasName(r.bias) +
         (r.input_mode == CUDNN_SKIP_INPUT ? " input_mode=skip" : " input_mode=linear") +
         " dtype=" + CudnnDTypeText(r.dtype) + " math_prec=" + CudnnDTypeText(r.math_prec) +
         " math=" + std::to_string(r.math_type) + " dropout=" + Probability(DropoutOf(r)) +
         " aux=" + std::to_string(r.aux_flags);
}

std::string DropoutFingerprint(float probability, uint64_t states_bytes) {
  return "cudnn dropout p=" + Probability(probability) + " states=" + std::to_string(states_bytes);
}

uint64_t Address(const void* pointer) {
  return reinterpret_cast<uint64_t>(pointer);
}

void AddDescriptorArguments(const RnnShape& r, std::vector<format::Argument>* args) {
  args->push_back(TextArgument("mode", libfacts::RnnModeName(r.mode)));
  args->push_back(TextArgument("direction", libfacts::RnnDirectionName(r.direction)));
  args->push_back(SignedArgument("layers", r.layers));
  args->push_back(SignedArgument("input_size", r.input));
  args->push_back(SignedArgument("hidden_size", r.hidden));
  args->push_back(SignedArgument("proj_size", r.proj));
  args->push_back(TextArgument("bias", libfacts::RnnBiasName(r.bias)));
  args->push_back(TextArgument("input_mode", r.input_mode == CUDNN_SKIP_INPUT ? "skip" : "linear"));
  args->push_back(TextArgument("dtype", CudnnDTypeText(r.dtype)));
  args->push_back(TextArgument("math_prec", CudnnDTypeText(r.math_prec)));
  args->push_back(UnsignedArgument("math", static_cast<uint64_t>(r.math_type)));
  args->push_back(DoubleArgument("dropout", DropoutOf(r)));
  args->push_back(UnsignedArgument("aux_flags", r.aux_flags));
}

// ---- one RNN call ---------------------------------------------------------------------------

enum class Call {
  kForwardInference,
  kForwardTraining,
  kBackwardData,
  kBackwardWeightsAdd,
  kBackwardWeightsSet
};

const char* CallName(Call call) {
  switch (call) {
    case Call::kForwardInference:
      return "forward-inference";
    case Call::kForwardTraining:
      return "forward-training";
    case Call::kBackwardData:
      return "bwd-data";
    case Call::kBackwardWeightsAdd:
      return "bwd-weights-add";
    case Call::kBackwardWeightsSet:
      return "bwd-weights-set";
  }
  return "?";
}

// The problem of a call: its descriptors as the shadows (or the library) know them.
struct Problem {
  RnnShape rnn;
  DataShape x;
  DataShape y;
  std::optional<StateTensor> h;
  std::optional<StateTensor> c;
};

std::optional<Problem> Describe(cudnnRNNDescriptor_t rnn, cudnnRNNDataDescriptor_t x,
                                cudnnRNNDataDescriptor_t y, cudnnTensorDescriptor_t h,
                                cudnnTensorDescriptor_t c) {
  RnnShadows& shadows = RnnShadows::Get();
  std::optional<RnnShape> r = shadows.Rnn(rnn);
  std::optional<DataShape> xs = shadows.Data(x);
  std::optional<DataShape> ys = shadows.Data(y);
  if (!r || !xs || !ys) return std::nullopt;
  return Problem{*r, std::move(*xs), std::move(*ys), StateOf(h), StateOf(c)};
}

std::string Lengths(const DataShape& d) {
  bool full = true;
  for (int length : d.lengths) full = full && length == d.max_seq;
  if (full) return "full";
  std::string text;
  for (int length : d.lengths) text += (text.empty() ? "" : ",") + std::to_string(length);
  return text;
}

std::string CallFingerprint(Call call, const Problem& p) {
  return DescriptorFingerprint(p.rnn) + " call=" + CallName(call) +
         " seq=" + std::to_string(p.x.max_seq) + " batch=" + std::to_string(p.x.batch) +
         " layout=" + libfacts::RnnLayoutName(p.x.layout) + " x=" + CudnnDTypeText(p.x.dtype) +
         "x" + std::to_string(p.x.vector) + " y=" + CudnnDTypeText(p.y.dtype) + "x" +
         std::to_string(p.y.vector) + " lengths=" + Lengths(p.x);
}

uint64_t DataBytes(const DataShape& d) {
  uint64_t rows = 0;
  if (d.layout == CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED) {
    for (int length : d.lengths) rows += static_cast<uint64_t>(std::max(length, 0));
  } else {
    rows =
        static_cast<uint64_t>(std::max(d.max_seq, 0)) * static_cast<uint64_t>(std::max(d.batch, 0));
  }
  return rows * static_cast<uint64_t>(std::max(d.vector, 0)) *
         format::DTypeBytes(CudnnDType(d.dtype));
}

uint64_t StateBytes(const std::optional<StateTensor>& t) {
  if (!t) return 0;
  uint64_t last = 0;
  for (size_t i = 0; i < t->dims.size(); ++i) {
    if (t->dims[i] <= 0 || t->strides[i] < 0) return 0;
    last += static_cast<uint64_t>(t->dims[i] - 1) * static_cast<uint64_t>(t->strides[i]);
  }
  return (last + 1) * format::DTypeBytes(CudnnDType(t->dtype));
}

// The buffers of one call, by role; a null address is left out.
struct Buffers {
  std::vector<Extent> inputs;
  std::vector<Extent> outputs;
  std::vector<std::pair<std::string, uint64_t>> pointers;  // every buffer argument, in order
};

void Add(std::vector<Extent>* to, const char* role, const void* pointer, uint64_t bytes,
         cudnnDataType_t dtype) {
  if (pointer == nullptr || bytes == 0) return;
  to->push_back(Extent{role, Address(pointer), bytes, CudnnDType(dtype)});
}

// What every RNN call records around `real()`: the op, its problem, policy-independent
// arguments, digests and captures. `rng` is the dropout state a training forward consumes.
template <typename Real>
cudnnStatus_t RecordRnnCall(Session& session, RealCall<cudnnStatus_t>& call, const char* name,
                            Call kind, cudnnHandle_t handle, const std::optional<Problem>& problem,
                            const Buffers& buffers, uint64_t weight_bytes, uint64_t workspace_bytes,
                            uint64_t reserve_bytes, const void* reserve, Real real) {
  const uint64_t stream = CudnnHandleStream(handle);
  format::OpRecord op =
      session.BeginOp(format::OpKind::kOther, name, session.StreamId(stream, false));
  const std::string fingerprint = problem ? CallFingerprint(kind, *problem) : "";
  op.args.push_back(TextArgument("fingerprint", fingerprint));
  op.args.push_back(TextArgument("call", CallName(kind)));
  if (problem) {
    AddDescriptorArguments(problem->rnn, &op.args);
    op.args.push_back(SignedArgument("seq_length", problem->x.max_seq));
    op.args.push_back(SignedArgument("batch", problem->x.batch));
    op.args.push_back(TextArgument("layout", libfacts::RnnLayoutName(problem->x.layout)));
    op.args.push_back(SignedArgument("x_vector", problem->x.vector));
    op.args.push_back(SignedArgument("y_vector", problem->y.vector));
    op.args.push_back(TextArgument("seq_lengths", Lengths(problem->x)));
    if (problem->h) op.args.push_back(DimsArgument("h_dims", problem->h->dims));
    if (problem->h) op.args.push_back(DimsArgument("h_strides", problem->h->strides));
    if (problem->c) op.args.push_back(DimsArgument("c_dims", problem->c->dims));
    if (problem->c) op.args.push_back(DimsArgument("c_strides", problem->c->strides));
  }
  for (const auto& [role, address] : buffers.pointers) {
    op.args.push_back(PointerArgument(session, role, address));
  }
  op.args.push_back(UnsignedArgument("weight_space_bytes", weight_bytes));
  op.args.push_back(UnsignedArgument("workspace_bytes", workspace_bytes));
  op.args.push_back(UnsignedArgument("reserve_bytes", reserve_bytes));
  if (reserve != nullptr) op.args.push_back(PointerArgument(session, "reserve", Address(reserve)));

  if (problem) {
    op.algorithm = Choice(problem->rnn.algo, problem->rnn.source);
    // Dropout between layers draws from the states buffer in a training forward only.
    const float dropout = DropoutOf(problem->rnn);
    if (kind == Call::kForwardTraining && dropout > 0 && problem->rnn.layers > 1) {
      const std::optional<DropoutShape> shape = RnnShadows::Get().Dropout(problem->rnn.dropout);
      const std::optional<StatesUse> use =
          shape ? RnnShadows::Get().States(shape->states, true) : std::nullopt;
      format::RngState rng;
      rng.generator = kDropoutGenerator;
      rng.seed = use ? use->seed : (shape ? shape->seed : 0);
      rng.offset = use ? use->uses : 0;
      op.rng = rng;
      if (shape) op.args.push_back(UnsignedArgument("dropout_states_bytes", shape->states_bytes));
    }
  }
  op.inputs = DigestExtents(session, stream, buffers.inputs);
  const bool capture = CaptureWanted(op);
  if (capture) {
    std::vector<Extent> captured = buffers.inputs;
    // The reserve space holds what the forward left for the backward calls: replaying one
    // needs it (it is not digested: cuDNN's layout of it is private and may hold bytes the
    // call never writes).
    if (reserve != nullptr && reserve_bytes > 0 && kind != Call::kForwardTraining &&
        kind != Call::kForwardInference) {
      captured.push_back(
          Extent{"reserve", Address(reserve), reserve_bytes, format::DType::kUnknown});
    }
    CaptureExtents(session, stream, captured, "in", &op);
  }
  const cudnnStatus_t status = call.Run(real);
  if (status == CUDNN_STATUS_SUCCESS) op.outputs = DigestExtents(session, stream, buffers.outputs);
  if (capture && status == CUDNN_STATUS_SUCCESS) {
    CaptureExtents(session, stream, buffers.outputs, "out", &op);
  }
  session.EndOp(op, static_cast<int32_t>(status));
  return status;
}

// ---- the policy at cudnnSetRNNDescriptor_v8 -------------------------------------------------

// The algorithm the descriptor gets: the program's, or the policy's replacement.
RnnShape Choose(Session& session, uint64_t sequence, RnnShape requested,
                const std::string& fingerprint) {
  format::PolicyDecisionRecord decision;
  decision.op_sequence = sequence;
  decision.library = "cudnn";
  decision.from_choice = Choice(requested.algo, format::ChoiceSource::kRequested);
  const std::string from = libfacts::RnnAlgoName(requested.algo);

  if (session.policy().mode == PolicyMode::kEnforce) {
    const char* config = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    if (!libfacts::CublasWorkspaceHasOneSize(config) && RnnShadows::Get().FirstWorkspaceCheck()) {
      format::PolicyDecisionRecord workspace = decision;
      workspace.from_choice.reset();
      workspace.action = std::string(
                             "cannot make cuDNN RNN calls deterministic: cuDNN's release "
                             "notes ask for one cuBLAS workspace size "
                             "(CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8), the program "
                             "runs with CUBLAS_WORKSPACE_CONFIG=") +
                         (config != nullptr ? config : "(unset)");
      workspace.applied = false;
      session.Decide(workspace);
    }
    if (requested.algo == libfacts::kRnnDeterministicAlgo) return requested;
    RnnShape chosen = requested;
    chosen.algo = libfacts::kRnnDeterministicAlgo;
    chosen.source = format::ChoiceSource::kEnforced;
    decision.to_choice = Choice(chosen.algo, chosen.source);
    decision.action = "replaced RNN algo " + from +
                      " (cuDNN documents nothing of its determinism) by " +
                      libfacts::RnnAlgoName(chosen.algo);
    session.Decide(decision);
    return chosen;
  }

  if (session.policy().mode != PolicyMode::kPin || session.pins() == nullptr) return requested;
  const format::AlgorithmChoice* pinned = session.pins()->Choice(fingerprint);
  if (pinned == nullptr || pinned->library != "cudnn" ||
      pinned->name.rfind("CUDNN_RNN_ALGO_", 0) != 0) {
    decision.action = "no cuDNN RNN algorithm recorded in the pin trace for " + fingerprint;
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  decision.to_choice = Choice(pinned->id, format::ChoiceSource::kPinned);
  if (std::string mismatch = session.pins()->Mismatch(session.header(), "cudnn");
      !mismatch.empty()) {
    decision.action = "cannot pin cuDNN RNN algorithms: " + mismatch;
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  RnnShape chosen = requested;
  chosen.algo = static_cast<cudnnRNNAlgo_t>(pinned->id);
  chosen.source = format::ChoiceSource::kPinned;
  if (chosen.algo == requested.algo) return chosen;
  if (chosen.algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC) {
    decision.action = "cannot pin RNN algo " + pinned->name + ": it needs cudnnBuildRNNDynamic " +
                      "with the batch size, which a program that asked for " + from +
                      " does not call";
    decision.applied = false;
    session.Decide(decision);
    return requested;
  }
  decision.action = "replaced RNN algo " + from + " by pinned " + pinned->name;
  session.Decide(decision);
  return chosen;
}

// The op of a dropout Set/Restore: probability, states, their RNG state.
format::OpRecord DropoutOp(Session& session, const char* name, cudnnHandle_t handle, float dropout,
                           const void* states, size_t states_bytes) {
  format::OpRecord op = session.BeginOp(format::OpKind::kOther, name,
                                        session.StreamId(CudnnHandleStream(handle), false));
  op.args.push_back(TextArgument("fingerprint", DropoutFingerprint(dropout, states_bytes)));
  op.args.push_back(DoubleArgument("dropout", dropout));
  op.args.push_back(PointerArgument(session, "states", Address(states)));
  op.args.push_back(UnsignedArgument("states_bytes", states_bytes));
  return op;
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::DropoutShape;
using ndt::tracer::kCudnn;
using ndt::tracer::RealCall;
using ndt::tracer::RnnShadows;
using ndt::tracer::RnnShape;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;

extern "C" {

// ---- dropout ----

cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t* bytes) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDropoutGetStatesSize);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnDropoutGetStatesSize", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, bytes); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kOther, "cudnnDropoutGetStatesSize",
                            session.StreamId(ndt::tracer::CudnnHandleStream(handle), false));
        const cudnnStatus_t status = call.Run([&] { return real(handle, bytes); });
        if (status == CUDNN_STATUS_SUCCESS && bytes != nullptr) {
          op.args.push_back(ndt::tracer::UnsignedArgument("states_bytes", *bytes));
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
                                        float dropout, void* states, size_t states_bytes,
                                        unsigned long long seed) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetDropoutDescriptor);
  const auto set = [&](unsigned long long used_seed) {
    const cudnnStatus_t status = real(desc, handle, dropout, states, states_bytes, used_seed);
    if (status == CUDNN_STATUS_SUCCESS) {
      ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow", [&] {
        RnnShadows::Get().SetDropout(
            desc, DropoutShape{dropout, ndt::tracer::Address(states), states_bytes, used_seed});
        if (states != nullptr) {
          RnnShadows::Get().InitStates(ndt::tracer::Address(states), used_seed);
        }
      });
    }
    return status;
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnSetDropoutDescriptor", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return set(seed); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        ndt::format::OpRecord op = ndt::tracer::DropoutOp(session, "cudnnSetDropoutDescriptor",
                                                          handle, dropout, states, states_bytes);
        unsigned long long used = seed;
        const std::string fingerprint = ndt::tracer::DropoutFingerprint(dropout, states_bytes);
        if (session.policy().mode == ndt::tracer::PolicyMode::kPin && session.pins() != nullptr) {
          ndt::format::PolicyDecisionRecord decision;
          decision.op_sequence = op.sequence;
          decision.library = "cudnn";
          const ndt::format::RngState* pinned = session.pins()->Rng(fingerprint);
          if (pinned == nullptr || pinned->generator != ndt::tracer::kDropoutGenerator) {
            decision.action = "no cuDNN dropout seed recorded in the pin trace for " + fingerprint;
            decision.applied = false;
            session.Decide(decision);
          } else if (pinned->seed != seed) {
            used = pinned->seed;
            decision.action = "replaced the cuDNN dropout seed " + std::to_string(seed) +
                              " by the pinned " + std::to_string(used);
            session.Decide(decision);
          }
        }
        ndt::format::RngState rng;
        rng.generator = ndt::tracer::kDropoutGenerator;
        rng.seed = used;
        op.rng = rng;
        const cudnnStatus_t status = call.Run([&] { return set(used); });
        if (status == CUDNN_STATUS_SUCCESS && states != nullptr) {
          op.outputs = ndt::tracer::DigestExtents(
              session, ndt::tracer::CudnnHandleStream(handle),
              {ndt::tracer::Extent{"states", ndt::tracer::Address(states), states_bytes,
                                   ndt::format::DType::kUnknown}});
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
                                            float dropout, void* states, size_t states_bytes,
                                            unsigned long long seed) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnRestoreDropoutDescriptor);
  const auto restore = [&] {
    const cudnnStatus_t status = real(desc, handle, dropout, states, states_bytes, seed);
    if (status == CUDNN_STATUS_SUCCESS) {
      ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow", [&] {
        RnnShadows::Get().SetDropout(
            desc, DropoutShape{dropout, ndt::tracer::Address(states), states_bytes, seed});
      });
    }
    return status;
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnRestoreDropoutDescriptor", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, restore,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        ndt::format::OpRecord op = ndt::tracer::DropoutOp(session, "cudnnRestoreDropoutDescriptor",
                                                          handle, dropout, states, states_bytes);
        op.args.push_back(ndt::tracer::UnsignedArgument("seed", seed));
        // The state the restored descriptor draws from: that of its states buffer.
        const auto use = RnnShadows::Get().States(ndt::tracer::Address(states), false);
        ndt::format::RngState rng;
        rng.generator = ndt::tracer::kDropoutGenerator;
        rng.seed = use ? use->seed : seed;
        rng.offset = use ? use->uses : 0;
        op.rng = rng;
        if (states != nullptr) {
          op.inputs = ndt::tracer::DigestExtents(
              session, ndt::tracer::CudnnHandleStream(handle),
              {ndt::tracer::Extent{"states", ndt::tracer::Address(states), states_bytes,
                                   ndt::format::DType::kUnknown}});
        }
        const cudnnStatus_t status = call.Run(restore);
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyDropoutDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow", [&] { RnnShadows::Get().Forget(desc); });
  return real(desc);
}

// ---- RNN descriptors ----

cudnnStatus_t cudnnSetRNNDescriptor_v8(
    cudnnRNNDescriptor_t desc, cudnnRNNAlgo_t algo, cudnnRNNMode_t mode, cudnnRNNBiasMode_t bias,
    cudnnDirectionMode_t direction, cudnnRNNInputMode_t input_mode, cudnnDataType_t dtype,
    cudnnDataType_t math_prec, cudnnMathType_t math_type, int32_t input_size, int32_t hidden_size,
    int32_t proj_size, int32_t layers, cudnnDropoutDescriptor_t dropout, uint32_t aux_flags) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetRNNDescriptor_v8);
  RnnShape requested;
  requested.algo = algo;
  requested.requested_algo = algo;
  requested.mode = mode;
  requested.bias = bias;
  requested.direction = direction;
  requested.input_mode = input_mode;
  requested.dtype = dtype;
  requested.math_prec = math_prec;
  requested.math_type = math_type;
  requested.input = input_size;
  requested.hidden = hidden_size;
  requested.proj = proj_size;
  requested.layers = layers;
  requested.dropout = dropout;
  requested.aux_flags = aux_flags;
  const auto set = [&](const RnnShape& shape) {
    const cudnnStatus_t status =
        real(desc, shape.algo, mode, bias, direction, input_mode, dtype, math_prec, math_type,
             input_size, hidden_size, proj_size, layers, dropout, aux_flags);
    if (status == CUDNN_STATUS_SUCCESS) {
      ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow",
                                [&] { RnnShadows::Get().SetRnn(desc, shape); });
    }
    return status;
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnSetRNNDescriptor_v8", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return set(requested); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kOther, "cudnnSetRNNDescriptor_v8", 0);
        const std::string fingerprint = ndt::tracer::DescriptorFingerprint(requested);
        op.args.push_back(ndt::tracer::TextArgument("fingerprint", fingerprint));
        ndt::tracer::AddDescriptorArguments(requested, &op.args);
        const RnnShape chosen = ndt::tracer::Choose(session, op.sequence, requested, fingerprint);
        op.algorithm = ndt::tracer::Choice(chosen.algo, chosen.source);
        const cudnnStatus_t status = call.Run([&] { return set(chosen); });
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

// A program that asked for CUDNN_RNN_ALGO_PERSIST_DYNAMIC builds its plan for a batch size;
// when the policy replaced that algorithm there is no plan to build, and the real call would
// refuse the descriptor (CUDNN_STATUS_BAD_PARAM): the program is told it succeeded, as it
// would have with the algorithm it asked for.
cudnnStatus_t cudnnBuildRNNDynamic(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                   int mini_batch) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnBuildRNNDynamic);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  std::optional<RnnShape> shape;
  ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow",
                            [&] { shape = RnnShadows::Get().Rnn(desc); });
  if (shape && shape->requested_algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC &&
      shape->algo != CUDNN_RNN_ALGO_PERSIST_DYNAMIC && mini_batch > 0) {
    return CUDNN_STATUS_SUCCESS;
  }
  return real(handle, desc, mini_batch);
}

cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyRNNDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow", [&] { RnnShadows::Get().Forget(desc); });
  return real(desc);
}

cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, cudnnDataType_t dtype,
                                        cudnnRNNDataLayout_t layout, int max_seq, int batch,
                                        int vector, const int lengths[], void* padding_fill) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnSetRNNDataDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  const cudnnStatus_t status =
      real(desc, dtype, layout, max_seq, batch, vector, lengths, padding_fill);
  if (status == CUDNN_STATUS_SUCCESS) {
    ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow", [&] {
      ndt::tracer::DataShape shape;
      shape.dtype = dtype;
      shape.layout = layout;
      shape.max_seq = max_seq;
      shape.batch = batch;
      shape.vector = vector;
      if (lengths != nullptr && batch > 0) shape.lengths.assign(lengths, lengths + batch);
      RnnShadows::Get().SetData(desc, std::move(shape));
    });
  }
  return status;
}

cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnDestroyRNNDataDescriptor);
  if (real == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ndt::tracer::ShadowSafely("cudnn RNN descriptor shadow", [&] { RnnShadows::Get().Forget(desc); });
  return real(desc);
}

// ---- sizes ----

cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                         size_t* bytes) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnGetRNNWeightSpaceSize);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnGetRNNWeightSpaceSize", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, desc, bytes); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kOther, "cudnnGetRNNWeightSpaceSize",
                            session.StreamId(ndt::tracer::CudnnHandleStream(handle), false));
        const std::optional<RnnShape> rnn = RnnShadows::Get().Rnn(desc);
        op.args.push_back(ndt::tracer::TextArgument(
            "fingerprint", rnn ? ndt::tracer::DescriptorFingerprint(*rnn) : ""));
        const cudnnStatus_t status = call.Run([&] { return real(handle, desc, bytes); });
        if (status == CUDNN_STATUS_SUCCESS && bytes != nullptr) {
          op.args.push_back(ndt::tracer::UnsignedArgument("weight_space_bytes", *bytes));
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                        cudnnForwardMode_t mode, cudnnRNNDataDescriptor_t x_desc,
                                        size_t* workspace_bytes, size_t* reserve_bytes) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnGetRNNTempSpaceSizes);
  const auto run = [&] { return real(handle, desc, mode, x_desc, workspace_bytes, reserve_bytes); };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnGetRNNTempSpaceSizes", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kOther, "cudnnGetRNNTempSpaceSizes",
                            session.StreamId(ndt::tracer::CudnnHandleStream(handle), false));
        const auto problem = ndt::tracer::Describe(desc, x_desc, x_desc, nullptr, nullptr);
        const auto kind = mode == CUDNN_FWD_MODE_TRAINING ? ndt::tracer::Call::kForwardTraining
                                                          : ndt::tracer::Call::kForwardInference;
        // The sizes follow from the algorithm: the fingerprint (without y) and the choice come
        // first, so that a different algorithm is a selection, not different arguments.
        op.args.push_back(ndt::tracer::TextArgument(
            "fingerprint", problem ? ndt::tracer::DescriptorFingerprint(problem->rnn) +
                                         " temp-space " + ndt::tracer::CallName(kind) +
                                         " seq=" + std::to_string(problem->x.max_seq) +
                                         " batch=" + std::to_string(problem->x.batch)
                                   : ""));
        if (problem) op.algorithm = ndt::tracer::Choice(problem->rnn.algo, problem->rnn.source);
        const cudnnStatus_t status = call.Run(run);
        if (status == CUDNN_STATUS_SUCCESS) {
          if (workspace_bytes != nullptr) {
            op.args.push_back(ndt::tracer::UnsignedArgument("workspace_bytes", *workspace_bytes));
          }
          if (reserve_bytes != nullptr) {
            op.args.push_back(ndt::tracer::UnsignedArgument("reserve_bytes", *reserve_bytes));
          }
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

// ---- the calls ----

cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                              cudnnForwardMode_t mode, const int32_t dev_seq_lengths[],
                              cudnnRNNDataDescriptor_t x_desc, const void* x,
                              cudnnRNNDataDescriptor_t y_desc, void* y,
                              cudnnTensorDescriptor_t h_desc, const void* hx, void* hy,
                              cudnnTensorDescriptor_t c_desc, const void* cx, void* cy,
                              size_t weight_bytes, const void* weights, size_t workspace_bytes,
                              void* workspace, size_t reserve_bytes, void* reserve) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnRNNForward);
  const auto run = [&] {
    return real(handle, desc, mode, dev_seq_lengths, x_desc, x, y_desc, y, h_desc, hx, hy, c_desc,
                cx, cy, weight_bytes, weights, workspace_bytes, workspace, reserve_bytes, reserve);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnRNNForward", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        using ndt::tracer::Add;
        const auto problem = ndt::tracer::Describe(desc, x_desc, y_desc, h_desc, c_desc);
        const auto kind = mode == CUDNN_FWD_MODE_TRAINING ? ndt::tracer::Call::kForwardTraining
                                                          : ndt::tracer::Call::kForwardInference;
        ndt::tracer::Buffers b;
        b.pointers = {{"x", ndt::tracer::Address(x)},
                      {"y", ndt::tracer::Address(y)},
                      {"hx", ndt::tracer::Address(hx)},
                      {"hy", ndt::tracer::Address(hy)},
                      {"cx", ndt::tracer::Address(cx)},
                      {"cy", ndt::tracer::Address(cy)},
                      {"weights", ndt::tracer::Address(weights)}};
        if (problem) {
          const bool lstm = problem->rnn.mode == CUDNN_LSTM;
          const uint64_t h = ndt::tracer::StateBytes(problem->h);
          const uint64_t c = ndt::tracer::StateBytes(problem->c);
          const cudnnDataType_t dtype = problem->rnn.dtype;
          Add(&b.inputs, "x", x, ndt::tracer::DataBytes(problem->x), problem->x.dtype);
          Add(&b.inputs, "hx", hx, h, dtype);
          if (lstm) Add(&b.inputs, "cx", cx, c, dtype);
          Add(&b.inputs, "weights", weights, weight_bytes, dtype);
          if (kind == ndt::tracer::Call::kForwardTraining &&
              ndt::tracer::DropoutOf(problem->rnn) > 0 && problem->rnn.layers > 1) {
            if (const auto dropout = RnnShadows::Get().Dropout(problem->rnn.dropout)) {
              b.inputs.push_back(ndt::tracer::Extent{"dropout_states", dropout->states,
                                                     dropout->states_bytes,
                                                     ndt::format::DType::kUnknown});
            }
          }
          Add(&b.outputs, "y", y, ndt::tracer::DataBytes(problem->y), problem->y.dtype);
          Add(&b.outputs, "hy", hy, h, dtype);
          if (lstm) Add(&b.outputs, "cy", cy, c, dtype);
        }
        return ndt::tracer::RecordRnnCall(session, call, "cudnnRNNForward", kind, handle, problem,
                                          b, weight_bytes, workspace_bytes, reserve_bytes, reserve,
                                          run);
      });
}

cudnnStatus_t cudnnRNNBackwardData_v8(
    cudnnHandle_t handle, cudnnRNNDescriptor_t desc, const int32_t dev_seq_lengths[],
    cudnnRNNDataDescriptor_t y_desc, const void* y, const void* dy, cudnnRNNDataDescriptor_t x_desc,
    void* dx, cudnnTensorDescriptor_t h_desc, const void* hx, const void* dhy, void* dhx,
    cudnnTensorDescriptor_t c_desc, const void* cx, const void* dcy, void* dcx, size_t weight_bytes,
    const void* weights, size_t workspace_bytes, void* workspace, size_t reserve_bytes,
    void* reserve) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnRNNBackwardData_v8);
  const auto run = [&] {
    return real(handle, desc, dev_seq_lengths, y_desc, y, dy, x_desc, dx, h_desc, hx, dhy, dhx,
                c_desc, cx, dcy, dcx, weight_bytes, weights, workspace_bytes, workspace,
                reserve_bytes, reserve);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnRNNBackwardData_v8", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        using ndt::tracer::Add;
        using ndt::tracer::Address;
        const auto problem = ndt::tracer::Describe(desc, x_desc, y_desc, h_desc, c_desc);
        ndt::tracer::Buffers b;
        b.pointers = {{"y", Address(y)},     {"dy", Address(dy)},
                      {"dx", Address(dx)},   {"hx", Address(hx)},
                      {"dhy", Address(dhy)}, {"dhx", Address(dhx)},
                      {"cx", Address(cx)},   {"dcy", Address(dcy)},
                      {"dcx", Address(dcx)}, {"weights", Address(weights)}};
        if (problem) {
          const bool lstm = problem->rnn.mode == CUDNN_LSTM;
          const uint64_t h = ndt::tracer::StateBytes(problem->h);
          const uint64_t c = ndt::tracer::StateBytes(problem->c);
          const cudnnDataType_t dtype = problem->rnn.dtype;
          const uint64_t y_bytes = ndt::tracer::DataBytes(problem->y);
          Add(&b.inputs, "y", y, y_bytes, problem->y.dtype);
          Add(&b.inputs, "dy", dy, y_bytes, problem->y.dtype);
          Add(&b.inputs, "hx", hx, h, dtype);
          Add(&b.inputs, "dhy", dhy, h, dtype);
          if (lstm) Add(&b.inputs, "cx", cx, c, dtype);
          if (lstm) Add(&b.inputs, "dcy", dcy, c, dtype);
          Add(&b.inputs, "weights", weights, weight_bytes, dtype);
          Add(&b.outputs, "dx", dx, ndt::tracer::DataBytes(problem->x), problem->x.dtype);
          Add(&b.outputs, "dhx", dhx, h, dtype);
          if (lstm) Add(&b.outputs, "dcx", dcx, c, dtype);
        }
        return ndt::tracer::RecordRnnCall(
            session, call, "cudnnRNNBackwardData_v8", ndt::tracer::Call::kBackwardData, handle,
            problem, b, weight_bytes, workspace_bytes, reserve_bytes, reserve, run);
      });
}

cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                         cudnnWgradMode_t add_grad, const int32_t dev_seq_lengths[],
                                         cudnnRNNDataDescriptor_t x_desc, const void* x,
                                         cudnnTensorDescriptor_t h_desc, const void* hx,
                                         cudnnRNNDataDescriptor_t y_desc, const void* y,
                                         size_t weight_bytes, void* dweights,
                                         size_t workspace_bytes, void* workspace,
                                         size_t reserve_bytes, void* reserve) {
  const auto real = NDT_REAL_LIBRARY(kCudnn, cudnnRNNBackwardWeights_v8);
  const auto run = [&] {
    return real(handle, desc, add_grad, dev_seq_lengths, x_desc, x, h_desc, hx, y_desc, y,
                weight_bytes, dweights, workspace_bytes, workspace, reserve_bytes, reserve);
  };
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnRNNBackwardWeights_v8", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED, run,
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        using ndt::tracer::Add;
        using ndt::tracer::Address;
        const auto problem = ndt::tracer::Describe(desc, x_desc, y_desc, h_desc, nullptr);
        const bool add = add_grad == CUDNN_WGRAD_MODE_ADD;
        ndt::tracer::Buffers b;
        b.pointers = {{"x", Address(x)},
                      {"hx", Address(hx)},
                      {"y", Address(y)},
                      {"dweights", Address(dweights)}};
        if (problem) {
          const cudnnDataType_t dtype = problem->rnn.dtype;
          Add(&b.inputs, "x", x, ndt::tracer::DataBytes(problem->x), problem->x.dtype);
          Add(&b.inputs, "hx", hx, ndt::tracer::StateBytes(problem->h), dtype);
          Add(&b.inputs, "y", y, ndt::tracer::DataBytes(problem->y), problem->y.dtype);
          // CUDNN_WGRAD_MODE_ADD adds into dweights: what it held before is an input.
          if (add) Add(&b.inputs, "dweights", dweights, weight_bytes, dtype);
          Add(&b.outputs, "dweights", dweights, weight_bytes, dtype);
        }
        return ndt::tracer::RecordRnnCall(
            session, call, "cudnnRNNBackwardWeights_v8",
            add ? ndt::tracer::Call::kBackwardWeightsAdd : ndt::tracer::Call::kBackwardWeightsSet,
            handle, problem, b, weight_bytes, workspace_bytes, reserve_bytes, reserve, run);
      });
}

}  // extern "C"
