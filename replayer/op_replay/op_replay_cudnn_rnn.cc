// Standalone replay of cuDNN RNN calls (cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8, recorded by tracer/hooks_cudnn_rnn.cc): the RNN, data, state and
// dropout descriptors are rebuilt from the op's recorded arguments through the real
// libcudnn.so.9, every captured input (the reserve space of the backward calls and the dropout
// states of a training forward included) is uploaded before each run, and the call's outputs
// (y, hy, cy / dx, dhx, dcx / the weight gradient) are compared end to end.
//
// --try-deterministic runs CUDNN_RNN_ALGO_STANDARD (ndtrace's deterministic choice,
// libfacts/cudnn_rnn.h) as the alternative of a forward call; a backward call reads the reserve
// space its forward wrote with the recorded algorithm, which cuDNN does not document as valid for
// another algorithm, so it has no alternative.
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "libfacts/cudnn_rnn.h"
#include "replayer/op_replay/op_replay_cudnn_types.h"
#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {
namespace {

#define NDT_CUDNN_RNN_FUNCTIONS(X)                                                                 \
  X(cudnnGetErrorString)                                                                           \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor)      \
      X(cudnnDestroyTensorDescriptor) X(cudnnCreateDropoutDescriptor)                              \
          X(cudnnRestoreDropoutDescriptor) X(cudnnDestroyDropoutDescriptor)                        \
              X(cudnnCreateRNNDescriptor) X(cudnnSetRNNDescriptor_v8) X(cudnnDestroyRNNDescriptor) \
                  X(cudnnBuildRNNDynamic) X(cudnnCreateRNNDataDescriptor)                          \
                      X(cudnnSetRNNDataDescriptor) X(cudnnDestroyRNNDataDescriptor)                \
                          X(cudnnGetRNNTempSpaceSizes) X(cudnnRNNForward)                          \
                              X(cudnnRNNBackwardData_v8) X(cudnnRNNBackwardWeights_v8)

struct CudnnRnn {
#define NDT_CUDNN_SLOT(name) decltype(&::name) name = nullptr;
  NDT_CUDNN_RNN_FUNCTIONS(NDT_CUDNN_SLOT)
#undef NDT_CUDNN_SLOT

  std::string Error(const char* api, cudnnStatus_t status) const {
    return fmt::format("{}: {}", api, cudnnGetErrorString(status));
  }
};

StatusOr<const CudnnRnn*> LoadCudnnRnn() {
  return LoadOnce<CudnnRnn>("libcudnn.so.9",
                            [](void* library, CudnnRnn* cudnn, std::string* missing) {
#define NDT_RESOLVE(name) Resolve(library, #name, &cudnn->name, missing);
                              NDT_CUDNN_RNN_FUNCTIONS(NDT_RESOLVE)
#undef NDT_RESOLVE
                            });
}

enum class Call { kForwardInference, kForwardTraining, kBackwardData, kBackwardWeights };

// A recorded RNN call, rebuilt from the op's arguments.
struct RnnCall {
  Call call = Call::kForwardTraining;
  bool add_grad = true;  // backward weights: CUDNN_WGRAD_MODE_ADD
  cudnnRNNMode_t mode = CUDNN_LSTM;
  cudnnDirectionMode_t direction = CUDNN_UNIDIRECTIONAL;
  cudnnRNNBiasMode_t bias = CUDNN_RNN_DOUBLE_BIAS;
  cudnnRNNInputMode_t input_mode = CUDNN_LINEAR_INPUT;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT, math_prec = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  int32_t layers = 0, input = 0, hidden = 0, proj = 0;
  uint32_t aux_flags = 0;
  float dropout = 0;
  uint64_t dropout_states_bytes = 0;
  int seq = 0, batch = 0, x_vector = 0, y_vector = 0;
  cudnnRNNDataLayout_t layout = CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  std::vector<int> lengths;
  std::vector<int64_t> h_dims, h_strides, c_dims, c_strides;
  uint64_t weight_bytes = 0, reserve_bytes = 0;
  int64_t algo = 0;
  std::string fingerprint;
};

template <typename Enum>
std::optional<Enum> ByName(const std::string& text, std::string (*name)(int64_t), int count) {
  for (int i = 0; i < count; ++i) {
    if (name(i) == text) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

uint64_t DataBytes(const RnnCall& c, int vector) {
  uint64_t rows = 0;
  if (c.layout == CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED) {
    for (int length : c.lengths) rows += static_cast<uint64_t>(length);
  } else {
    rows = static_cast<uint64_t>(c.seq) * static_cast<uint64_t>(c.batch);
  }
  return rows * static_cast<uint64_t>(vector) * ElementBytes(c.dtype);
}

uint64_t StateBytes(const RnnCall& c, const std::vector<int64_t>& dims,
                    const std::vector<int64_t>& strides) {
  if (dims.empty() || dims.size() != strides.size()) return 0;
  uint64_t last = 0;
  for (size_t i = 0; i < dims.size(); ++i) last += static_cast<uint64_t>(dims[i] - 1) * strides[i];
  return (last + 1) * ElementBytes(c.dtype);
}

StatusOr<RnnCall> DescribeRnn(const format::OpRecord& op) {
  RnnCall c;
  std::string missing;
  const auto note = [&](const char* name) {
    missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
  };
  const auto text = [&](const char* name) -> std::string {
    const std::string* value = TextOf(op, name);
    if (value == nullptr) note(name);
    return value != nullptr ? *value : "";
  };
  const auto number = [&](const char* name, int64_t low, int64_t high) -> int64_t {
    const format::Argument* argument = FindArgument(op, name);
    int64_t value = -1;
    if (argument != nullptr) {
      if (const auto* s = std::get_if<int64_t>(&argument->value)) value = *s;
      if (const auto* u = std::get_if<uint64_t>(&argument->value)) {
        value = *u > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(*u);
      }
    }
    if (value < low || value > high) {
      note(name);
      return low;
    }
    return value;
  };
  const auto dims = [&](const char* name, std::vector<int64_t>* out) {
    const format::Argument* argument = FindArgument(op, name);
    const auto* value =
        argument == nullptr ? nullptr : std::get_if<format::Argument::Dims>(&argument->value);
    if (value == nullptr) return;  // optional (a GRU has no c)
    if (value->empty() || value->size() > 8 ||
        std::any_of(value->begin(), value->end(),
                    [](int64_t v) { return v <= 0 || v > INT32_MAX; })) {
      note(name);
      return;
    }
    *out = *value;
  };
  const std::string call = text("call");
  if (call == "forward-inference")
    c.call = Call::kForwardInference;
  else if (call == "forward-training")
    c.call = Call::kForwardTraining;
  else if (call == "bwd-data")
    c.call = Call::kBackwardData;
  else if (call == "bwd-weights-add" || call == "bwd-weights-set")
    c.call = Call::kBackwardWeights;
  else if (!call.empty())
    note("call");
  c.add_grad = call != "bwd-weights-set";
  constexpr int64_t kMax = INT32_MAX;
  if (auto mode = ByName<cudnnRNNMode_t>(text("mode"), libfacts::RnnModeName, 4))
    c.mode = *mode;
  else
    note("mode");
  c.direction = text("direction") == "bidirectional" ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL;
  if (auto bias = ByName<cudnnRNNBiasMode_t>(text("bias"), libfacts::RnnBiasName, 4))
    c.bias = *bias;
  else
    note("bias");
  c.input_mode = text("input_mode") == "skip" ? CUDNN_SKIP_INPUT : CUDNN_LINEAR_INPUT;
  const auto type = [&](const char* name, cudnnDataType_t* out) {
    if (auto known = DataType(text(name)))
      *out = *known;
    else
      note(name);
  };
  type("dtype", &c.dtype);
  type("math_prec", &c.math_prec);
  c.math = static_cast<cudnnMathType_t>(number("math", 0, 16));
  c.layers = static_cast<int32_t>(number("layers", 1, 1 << 16));
  c.input = static_cast<int32_t>(number("input_size", 1, kMax));
  c.hidden = static_cast<int32_t>(number("hidden_size", 1, kMax));
  c.proj = static_cast<int32_t>(number("proj_size", 1, kMax));
  c.aux_flags = static_cast<uint32_t>(number("aux_flags", 0, UINT32_MAX));
  c.seq = static_cast<int>(number("seq_length", 1, kMax));
  c.batch = static_cast<int>(number("batch", 1, 1 << 24));
  c.x_vector = static_cast<int>(number("x_vector", 1, kMax));
  c.y_vector = static_cast<int>(number("y_vector", 1, kMax));
  if (auto layout = ByName<cudnnRNNDataLayout_t>(text("layout"), libfacts::RnnLayoutName, 3)) {
    c.layout = *layout;
  } else {
    note("layout");
  }
  if (const format::Argument* dropout = FindArgument(op, "dropout");
      dropout != nullptr && std::holds_alternative<double>(dropout->value)) {
    c.dropout = static_cast<float>(std::get<double>(dropout->value));
  } else {
    note("dropout");
  }
  if (FindArgument(op, "dropout_states_bytes") != nullptr) {
    c.dropout_states_bytes = static_cast<uint64_t>(number("dropout_states_bytes", 1, 1 << 30));
  }
  dims("h_dims", &c.h_dims);
  dims("h_strides", &c.h_strides);
  dims("c_dims", &c.c_dims);
  dims("c_strides", &c.c_strides);
  c.weight_bytes = static_cast<uint64_t>(number("weight_space_bytes", 1, int64_t{1} << 32));
  c.reserve_bytes = static_cast<uint64_t>(number("reserve_bytes", 0, int64_t{1} << 32));
  c.fingerprint = text("fingerprint");
  if (!op.algorithm)
    note("algorithm");
  else
    c.algo = op.algorithm->id;
  if (missing.empty()) {
    const std::string lengths = text("seq_lengths");
    if (lengths == "full") {
      c.lengths.assign(static_cast<size_t>(c.batch), c.seq);
    } else {
      for (const char* at = lengths.c_str(); *at != '\0';) {
        char* end = nullptr;
        c.lengths.push_back(static_cast<int>(std::strtol(at, &end, 10)));
        at = *end == ',' ? end + 1 : end;
        if (end == at && *end != '\0') break;
      }
      if (c.lengths.size() != static_cast<size_t>(c.batch)) note("seq_lengths");
    }
  }
  if (!missing.empty()) {
    return Status::Error(fmt::format("op {} lacks what is needed to rebuild its RNN call: {}",
                                     op.sequence, missing));
  }
  return c;
}

// The descriptors of one RNN call with one algorithm, destroyed with it.
class RnnDescriptors {
 public:
  explicit RnnDescriptors(const CudnnRnn& cudnn) : cudnn_(cudnn) {}
  RnnDescriptors(const RnnDescriptors&) = delete;
  RnnDescriptors& operator=(const RnnDescriptors&) = delete;
  ~RnnDescriptors() {
    if (x != nullptr) cudnn_.cudnnDestroyRNNDataDescriptor(x);
    if (y != nullptr) cudnn_.cudnnDestroyRNNDataDescriptor(y);
    if (h != nullptr) cudnn_.cudnnDestroyTensorDescriptor(h);
    if (c != nullptr) cudnn_.cudnnDestroyTensorDescriptor(c);
    if (rnn != nullptr) cudnn_.cudnnDestroyRNNDescriptor(rnn);
    if (dropout != nullptr) cudnn_.cudnnDestroyDropoutDescriptor(dropout);
    if (handle != nullptr) cudnn_.cudnnDestroy(handle);
  }

  // `states`: the device buffer the dropout descriptor draws from (null: none).
  Status Build(const RnnCall& call, int64_t algo, void* states) {
    const auto check = [&](const char* api, cudnnStatus_t status) {
      return status == CUDNN_STATUS_SUCCESS ? Status::Ok()
                                            : Status::Error(cudnn_.Error(api, status));
    };
    const auto state = [&](const std::vector<int64_t>& d, const std::vector<int64_t>& s,
                           cudnnTensorDescriptor_t* desc) {
      if (d.empty()) return Status::Ok();
      std::vector<int> dims(d.begin(), d.end()), strides(s.begin(), s.end());
      Status status =
          check("cudnnCreateTensorDescriptor", cudnn_.cudnnCreateTensorDescriptor(desc));
      if (!status.ok()) return status;
      return check("cudnnSetTensorNdDescriptor",
                   cudnn_.cudnnSetTensorNdDescriptor(*desc, call.dtype, static_cast<int>(d.size()),
                                                     dims.data(), strides.data()));
    };
    std::vector<int> lengths = call.lengths;
    double fill = 0;
    Status status = check("cudnnCreate", cudnn_.cudnnCreate(&handle));
    if (status.ok()) {
      status = check("cudnnCreateDropoutDescriptor", cudnn_.cudnnCreateDropoutDescriptor(&dropout));
    }
    if (status.ok()) {
      status = check("cudnnRestoreDropoutDescriptor",
                     cudnn_.cudnnRestoreDropoutDescriptor(
                         dropout, handle, call.dropout, states,
                         states != nullptr ? call.dropout_states_bytes : 0, 0));
    }
    if (status.ok())
      status = check("cudnnCreateRNNDescriptor", cudnn_.cudnnCreateRNNDescriptor(&rnn));
    if (status.ok()) {
      status = check("cudnnSetRNNDescriptor_v8",
                     cudnn_.cudnnSetRNNDescriptor_v8(
                         rnn, static_cast<cudnnRNNAlgo_t>(algo), call.mode, call.bias,
                         call.direction, call.input_mode, call.dtype, call.math_prec, call.math,
                         call.input, call.hidden, call.proj, call.layers, dropout, call.aux_flags));
    }
    if (status.ok() && algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC) {
      status = check("cudnnBuildRNNDynamic", cudnn_.cudnnBuildRNNDynamic(handle, rnn, call.batch));
    }
    for (auto [desc, vector] : {std::pair{&x, call.x_vector}, std::pair{&y, call.y_vector}}) {
      if (!status.ok()) break;
      status = check("cudnnCreateRNNDataDescriptor", cudnn_.cudnnCreateRNNDataDescriptor(desc));
      if (status.ok()) {
        status = check("cudnnSetRNNDataDescriptor",
                       cudnn_.cudnnSetRNNDataDescriptor(*desc, call.dtype, call.layout, call.seq,
                                                        call.batch, vector, lengths.data(), &fill));
      }
    }
    if (status.ok()) status = state(call.h_dims, call.h_strides, &h);
    if (status.ok()) status = state(call.c_dims, call.c_strides, &c);
    return status;
  }

  cudnnHandle_t handle = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr, c = nullptr;

 private:
  const CudnnRnn& cudnn_;
};

bool HandlesRnn(const format::OpRecord& op) {
  return op.kind == format::OpKind::kOther &&
         (op.name == "cudnnRNNForward" || op.name == "cudnnRNNBackwardData_v8" ||
          op.name == "cudnnRNNBackwardWeights_v8");
}

// A role of the call: its size, whether the call reads it, whether it is compared.
struct Role {
  const char* name;
  uint64_t bytes;
  bool input;
  bool output;
};

StatusOr<OpReplayReport> ReplayRnn(format::TraceReader& reader, const format::OpRecord& op,
                                   const OpReplayOptions& options) {
  StatusOr<RnnCall> described = DescribeRnn(op);
  if (!described.ok()) return described.status();
  const RnnCall& c = *described;
  const uint64_t x = DataBytes(c, c.x_vector), y = DataBytes(c, c.y_vector);
  const uint64_t h = StateBytes(c, c.h_dims, c.h_strides),
                 cs = StateBytes(c, c.c_dims, c.c_strides);
  const bool training = c.call == Call::kForwardTraining;
  std::vector<Role> roles;
  switch (c.call) {
    case Call::kForwardInference:
    case Call::kForwardTraining:
      roles = {{"x", x, true, false},
               {"hx", h, true, false},
               {"cx", cs, true, false},
               {"weights", c.weight_bytes, true, false},
               {"dropout_states", c.dropout_states_bytes, true, false},
               {"y", y, false, true},
               {"hy", h, false, true},
               {"cy", cs, false, true},
               {"reserve", c.reserve_bytes, false, false}};
      break;
    case Call::kBackwardData:
      roles = {{"y", y, true, false},
               {"dy", y, true, false},
               {"hx", h, true, false},
               {"dhy", h, true, false},
               {"cx", cs, true, false},
               {"dcy", cs, true, false},
               {"weights", c.weight_bytes, true, false},
               {"reserve", c.reserve_bytes, true, false},
               {"dx", x, false, true},
               {"dhx", h, false, true},
               {"dcx", cs, false, true}};
      break;
    case Call::kBackwardWeights:
      roles = {{"x", x, true, false},
               {"hx", h, true, false},
               {"y", y, true, false},
               {"reserve", c.reserve_bytes, true, false},
               {"dweights", c.weight_bytes, c.add_grad, true}};
      break;
  }
  // Which buffers exist: an input the op captured, an output it recorded (the program may pass
  // null for hy, cy, dhx, ...), the reserve space of a training forward.
  ReplayBuffers buffers;
  std::vector<int> index(roles.size(), -1);
  std::vector<uint64_t> sizes;
  std::string recorded;
  bool all_recorded = true;
  for (size_t i = 0; i < roles.size(); ++i) {
    const Role& role = roles[i];
    if (role.bytes == 0) continue;
    std::optional<std::string> initial;
    if (role.input) {
      StatusOr<std::optional<std::string>> input =
          ReadCaptured(reader, op, "in", role.name, role.bytes);
      if (!input.ok()) return input.status();
      initial = std::move(*input);
    }
    std::optional<std::string> output;
    if (role.output) {
      StatusOr<std::optional<std::string>> out =
          ReadCaptured(reader, op, "out", role.name, role.bytes);
      if (!out.ok()) return out.status();
      output = std::move(*out);
    }
    const bool reserve = std::string(role.name) == "reserve";
    const bool exists = initial || output || (reserve && training) ||
                        (role.output && FindArgument(op, std::string("blob:in:") + role.name));
    if (!exists) {
      if (role.input && std::string(role.name) != "hx" && std::string(role.name) != "cx" &&
          std::string(role.name) != "dhy" && std::string(role.name) != "dcy" &&
          std::string(role.name) != "dropout_states") {
        return Status::Error(
            fmt::format("op {} was captured without its input {}", op.sequence, role.name));
      }
      continue;
    }
    index[i] = static_cast<int>(buffers.buffers.size());
    ReplayBuffers::Buffer buffer;
    buffer.initial = initial ? std::move(*initial) : std::string(role.bytes, '\0');
    buffers.buffers.push_back(std::move(buffer));
    sizes.push_back(role.bytes);
    if (role.output) {
      if (buffers.output_bytes == 0) {
        buffers.output = static_cast<size_t>(index[i]);
        buffers.output_bytes = role.bytes;
      } else {
        buffers.more_outputs.emplace_back(static_cast<size_t>(index[i]), role.bytes);
      }
      if (output) recorded += *output;
      all_recorded = all_recorded && output.has_value();
    }
  }
  if (buffers.output_bytes == 0) {
    return Status::Error(fmt::format("op {} has no output to compare", op.sequence));
  }
  buffers.output_dtype = c.dtype == CUDNN_DATA_FLOAT    ? "f32"
                         : c.dtype == CUDNN_DATA_DOUBLE ? "f64"
                                                        : "";
  if (all_recorded) buffers.recorded_output = std::move(recorded);

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const CudnnRnn*> loaded_cudnn = LoadCudnnRnn();
  if (!loaded_cudnn.ok()) return loaded_cudnn.status();
  const CudnnRnn& cudnn = **loaded_cudnn;
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;
  std::vector<DeviceBuffer> memory;
  for (size_t i = 0; i < buffers.buffers.size(); ++i) {
    StatusOr<DeviceBuffer> buffer = Allocate(driver, sizes[i]);
    if (!buffer.ok()) return buffer.status();
    buffers.buffers[i].address = buffer->address();
    memory.push_back(std::move(*buffer));
  }
  const auto pointer = [&](const char* name) -> void* {
    for (size_t i = 0; i < roles.size(); ++i) {
      if (std::string(roles[i].name) == name && index[i] >= 0) return memory[index[i]].pointer();
    }
    return nullptr;
  };

  OpReplayReport report;
  report.problem = c.fingerprint;
  for (const Role& role : roles) {
    if (!role.output) continue;
    report.output_role += (report.output_role.empty() ? "" : "+") + std::string(role.name);
  }
  report.output_bytes = buffers.output_bytes;
  for (const auto& [buffer, bytes] : buffers.more_outputs) report.output_bytes += bytes;

  const auto run_algorithm = [&](int64_t algo, bool recorded_algo) -> StatusOr<AlgorithmRuns> {
    AlgorithmRuns runs;
    runs.algo = algo;
    runs.name = libfacts::RnnAlgoName(algo);
    runs.determinism = recorded_algo ? op.algorithm->determinism : format::Determinism::kUnknown;
    runs.recorded = recorded_algo;
    RnnDescriptors d(cudnn);
    if (Status status = d.Build(c, algo, pointer("dropout_states")); !status.ok()) {
      if (recorded_algo) return status.Prefixed(fmt::format("rebuilding op {}", op.sequence));
      runs.skipped = status.message();
      return runs;
    }
    size_t workspace_bytes = 0;
    if (const cudnnStatus_t status = cudnn.cudnnGetRNNTempSpaceSizes(
            d.handle, d.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, d.x,
            &workspace_bytes, nullptr);
        status != CUDNN_STATUS_SUCCESS) {
      if (recorded_algo) return Status::Error(cudnn.Error("cudnnGetRNNTempSpaceSizes", status));
      runs.skipped = cudnn.Error("cudnnGetRNNTempSpaceSizes", status);
      return runs;
    }
    StatusOr<DeviceBuffer> workspace = Allocate(driver, workspace_bytes);
    if (!workspace.ok()) return workspace.status();
    void* reserve = pointer("reserve");
    return RunCandidate(
        driver, buffers, std::move(runs), options.repeat, [&]() -> std::optional<std::string> {
          cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
          switch (c.call) {
            case Call::kForwardInference:
            case Call::kForwardTraining:
              status = cudnn.cudnnRNNForward(
                  d.handle, d.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                  nullptr, d.x, pointer("x"), d.y, pointer("y"), d.h, pointer("hx"), pointer("hy"),
                  d.c, pointer("cx"), pointer("cy"), c.weight_bytes, pointer("weights"),
                  workspace_bytes, workspace->pointer(), c.reserve_bytes, reserve);
              break;
            case Call::kBackwardData:
              status = cudnn.cudnnRNNBackwardData_v8(
                  d.handle, d.rnn, nullptr, d.y, pointer("y"), pointer("dy"), d.x, pointer("dx"),
                  d.h, pointer("hx"), pointer("dhy"), pointer("dhx"), d.c, pointer("cx"),
                  pointer("dcy"), pointer("dcx"), c.weight_bytes, pointer("weights"),
                  workspace_bytes, workspace->pointer(), c.reserve_bytes, reserve);
              break;
            case Call::kBackwardWeights:
              status = cudnn.cudnnRNNBackwardWeights_v8(
                  d.handle, d.rnn, c.add_grad ? CUDNN_WGRAD_MODE_ADD : CUDNN_WGRAD_MODE_SET,
                  nullptr, d.x, pointer("x"), d.h, pointer("hx"), d.y, pointer("y"), c.weight_bytes,
                  pointer("dweights"), workspace_bytes, workspace->pointer(), c.reserve_bytes,
                  reserve);
              break;
          }
          if (status == CUDNN_STATUS_SUCCESS) return std::nullopt;
          return cudnn.Error(op.name.c_str(), status);
        });
  };

  StatusOr<AlgorithmRuns> recorded_runs = run_algorithm(c.algo, true);
  if (!recorded_runs.ok()) {
    return recorded_runs.status().Prefixed(
        fmt::format("replaying op {} with {}", op.sequence, libfacts::RnnAlgoName(c.algo)));
  }
  report.algorithms.push_back(std::move(*recorded_runs));
  if (options.try_deterministic && c.algo != libfacts::kRnnDeterministicAlgo) {
    if (c.call == Call::kForwardInference || training) {
      StatusOr<AlgorithmRuns> alternative = run_algorithm(libfacts::kRnnDeterministicAlgo, false);
      if (!alternative.ok()) return alternative.status();
      report.algorithms.push_back(std::move(*alternative));
    } else {
      report.note = fmt::format(
          "no alternative tried: {} reads the reserve space its forward wrote with {}, which "
          "cuDNN does not document as valid for another algorithm; replay the forward with "
          "--try-deterministic, or record with --deterministic",
          op.name, libfacts::RnnAlgoName(c.algo));
    }
  }
  return report;
}

}  // namespace

const Replayer kCudnnRnnReplayer = {HandlesRnn, ReplayRnn};

}  // namespace ndt::replay::internal
