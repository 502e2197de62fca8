// Standalone replay of cuDNN backend execution plans (cudnnBackendExecute): the operation graph
// is rebuilt through the backend API of the real libcudnn.so.9 from the op's "graph" argument
// (written by tracer/hooks_cudnn_backend.cc when the op is captured; its format is in that
// file's essay), the recorded engine (global index and knobs, the op's AlgorithmChoice) is
// made into an engine config and a plan, and the plan runs on the captured tensors. With
// --try-deterministic every other engine the library numbers for the graph
// (CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) runs with its default knobs, unless it is
// noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC; engines that do not support the graph are
// listed as skipped.
//
// Covered: graphs of convolution operations (forward, backward data, backward filter) with
// exactly one output tensor that is not virtual. Anything else is refused as not rebuildable.
#include <cudnn.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "libfacts/knob_names.h"
#include "replayer/op_replay/op_replay_cudnn_types.h"
#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {
namespace {

#define NDT_CUDNN_BACKEND_FUNCTIONS(X)                                                            \
  X(cudnnGetErrorString)                                                                          \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) \
      X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute) X(cudnnBackendFinalize)             \
          X(cudnnBackendExecute)

struct CudnnBackend {
#define NDT_CUDNN_SLOT(name) decltype(&::name) name = nullptr;
  NDT_CUDNN_BACKEND_FUNCTIONS(NDT_CUDNN_SLOT)
#undef NDT_CUDNN_SLOT

  std::string Error(const char* api, cudnnStatus_t status) const {
    return fmt::format("{}: {}", api, cudnnGetErrorString(status));
  }
};

StatusOr<const CudnnBackend*> LoadCudnnBackend() {
  return LoadOnce<CudnnBackend>("libcudnn.so.9",
                                [](void* library, CudnnBackend* cudnn, std::string* missing) {
#define NDT_RESOLVE(name) Resolve(library, #name, &cudnn->name, missing);
                                  NDT_CUDNN_BACKEND_FUNCTIONS(NDT_RESOLVE)
#undef NDT_RESOLVE
                                });
}

// ---- the recorded graph ---------------------------------------------------------------------

// Limits of what a graph argument may describe: cuDNN's own (CUDNN_DIM_MAX dims), the
// capture's (it stores no extent above 1 GiB; ReadCaptured reads up to 4 GiB), and the host
// memory the harness holds (a copy of every tensor in memory).
constexpr size_t kMaxDims = CUDNN_DIM_MAX;
constexpr size_t kMaxTensors = 64;
constexpr uint64_t kMaxExtentBytes = uint64_t{1} << 32;
constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 34;

struct GraphTensor {
  std::string role;  // the name of its blobs
  int64_t uid = 0;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::string dtype_text;
  std::vector<int64_t> dims, strides;
  int64_t alignment = 0;
  bool is_virtual = false;
  uint64_t bytes = 0;  // first element to one past the last
  bool output = false;
  bool read = true;  // the graph reads it (an input, or an output blended with beta != 0)
};

// The convolution operations the replayer rebuilds: their attribute for each tensor role.
struct OperationKind {
  const char* name;  // as the tracer writes it
  cudnnBackendDescriptorType_t type;
  struct Role {
    const char* name;
    cudnnBackendAttributeName_t attribute;
    bool output;
  };
  Role roles[3];
  cudnnBackendAttributeName_t conv, alpha, beta;
};

constexpr OperationKind kOperationKinds[] = {
    {"conv_fwd",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     {{"x", CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, false},
      {"w", CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, false},
      {"y", CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, true}},
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {"conv_bwd_filter",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     {{"x", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, false},
      {"dy", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, false},
      {"dw", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, true}},
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
    {"conv_bwd_data",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     {{"w", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, false},
      {"dy", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, false},
      {"dx", CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, true}},
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
};

struct GraphOperation {
  const OperationKind* kind = nullptr;
  size_t tensors[3] = {0, 0, 0};  // indices into Graph::tensors, by the kind's roles
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  int64_t spatial = 0;
  std::vector<int64_t> pre_pad, post_pad, stride, dilation;
  double alpha = 1, beta = 0;
  bool double_scalars = false;
};

struct Graph {
  std::vector<GraphTensor> tensors;
  std::vector<GraphOperation> ops;
  size_t output = 0;  // the one tensor compared between runs
};

// A decimal integer in [min, max]; nullopt otherwise.
std::optional<int64_t> Integer(const std::string& text, int64_t min, int64_t max) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || value < min || value > max) return std::nullopt;
  return value;
}

std::optional<std::vector<int64_t>> Integers(const std::string& text, int64_t min, int64_t max) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    const std::optional<int64_t> value = Integer(part, min, max);
    if (!value || values.size() == kMaxDims) return std::nullopt;
    values.push_back(*value);
  }
  if (values.empty()) return std::nullopt;
  return values;
}

// "key=value" words after the first `skip` words of `line`; fails on a word without '='.
std::optional<std::map<std::string, std::string>> Fields(const std::string& line, size_t skip,
                                                         std::vector<std::string>* head) {
  std::map<std::string, std::string> fields;
  std::stringstream stream(line);
  std::string word;
  while (stream >> word) {
    if (head->size() < skip) {
      head->push_back(word);
      continue;
    }
    const size_t equals = word.find('=');
    if (equals == std::string::npos || equals == 0) return std::nullopt;
    fields[word.substr(0, equals)] = word.substr(equals + 1);
  }
  if (head->size() < skip) return std::nullopt;
  return fields;
}

// The graph of a captured cudnnBackendExecute, from its "graph" argument, checked against what
// the replayer can rebuild; the error says why not.
StatusOr<Graph> ParseGraph(const format::OpRecord& op) {
  const auto refuse = [&](const std::string& why) {
    return Status::Error(fmt::format(
        "op {} (cudnnBackendExecute): cannot rebuild its cuDNN graph: {}", op.sequence, why));
  };
  const std::string* text = TextOf(op, "graph");
  if (text == nullptr) {
    return refuse(
        "the trace does not describe it (no \"graph\" argument: the tracer describes graphs of "
        "convolutions only)");
  }
  std::stringstream lines(*text);
  std::string line;
  if (!std::getline(lines, line) || line != "cudnn_graph v1") {
    return refuse(
        fmt::format("its description is not \"cudnn_graph v1\" but \"{}\"", line.substr(0, 40)));
  }
  Graph graph;
  std::map<std::string, size_t> by_role;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    std::vector<std::string> head;
    if (line.rfind("tensor ", 0) == 0) {
      const auto fields = Fields(line, 2, &head);
      if (!fields || graph.tensors.size() == kMaxTensors) return refuse("bad line: " + line);
      GraphTensor tensor;
      tensor.role = head[1];
      const auto field = [&](const char* name) {
        const auto found = fields->find(name);
        return found == fields->end() ? std::string() : found->second;
      };
      const std::optional<int64_t> uid = Integer(field("uid"), INT64_MIN + 1, INT64_MAX);
      const std::optional<cudnnDataType_t> dtype = DataType(field("dtype"));
      const auto dims = Integers(field("dims"), 1, INT32_MAX);
      const auto strides = Integers(field("strides"), 0, INT32_MAX);
      const std::optional<int64_t> alignment = Integer(field("align"), 0, 1 << 20);
      const std::string is_virtual = field("virtual");
      if (!uid || !dims || !strides || !alignment || dims->size() != strides->size() ||
          (is_virtual != "0" && is_virtual != "1") || by_role.count(tensor.role) != 0) {
        return refuse("bad line: " + line);
      }
      if (!dtype) return refuse(fmt::format("tensor {} has dtype {}", tensor.role, field("dtype")));
      tensor.uid = *uid;
      tensor.dtype = *dtype;
      tensor.dtype_text = field("dtype");
      tensor.dims = *dims;
      tensor.strides = *strides;
      tensor.alignment = *alignment;
      tensor.is_virtual = is_virtual == "1";
      uint64_t last = 0;
      for (size_t i = 0; i < tensor.dims.size(); ++i) {
        last +=
            static_cast<uint64_t>(tensor.dims[i] - 1) * static_cast<uint64_t>(tensor.strides[i]);
        if (last >= kMaxExtentBytes) return refuse("tensor " + tensor.role + " is too large");
      }
      tensor.bytes = (last + 1) * ElementBytes(tensor.dtype);
      if (tensor.bytes > kMaxExtentBytes) return refuse("tensor " + tensor.role + " is too large");
      by_role[tensor.role] = graph.tensors.size();
      graph.tensors.push_back(std::move(tensor));
    } else if (line.rfind("op ", 0) == 0) {
      const auto fields = Fields(line, 2, &head);
      if (!fields) return refuse("bad line: " + line);
      GraphOperation operation;
      for (const OperationKind& kind : kOperationKinds) {
        if (head[1] == kind.name) operation.kind = &kind;
      }
      if (operation.kind == nullptr) {
        return refuse(fmt::format("its operation {} is not a convolution", head[1]));
      }
      const auto field = [&](const char* name) {
        const auto found = fields->find(name);
        return found == fields->end() ? std::string() : found->second;
      };
      for (int i = 0; i < 3; ++i) {
        const auto found = by_role.find(field(operation.kind->roles[i].name));
        if (found == by_role.end()) {
          return refuse(fmt::format("{} has no tensor {}", head[1], operation.kind->roles[i].name));
        }
        operation.tensors[i] = found->second;
      }
      const std::string mode = field("mode");
      const std::optional<cudnnDataType_t> comp = DataType(field("comp"));
      const std::optional<int64_t> spatial = Integer(field("spatial"), 1, kMaxDims - 2);
      if (mode.empty()) return refuse(head[1] + " has no convolution descriptor");
      if ((mode != "convolution" && mode != "cross_correlation") || !comp || !spatial) {
        return refuse("bad line: " + line);
      }
      operation.mode = mode == "convolution" ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
      operation.comp = *comp;
      operation.spatial = *spatial;
      const auto spatial_values = [&](const char* name, int64_t min, std::vector<int64_t>* out) {
        const auto values = Integers(field(name), min, INT32_MAX);
        if (!values || values->size() != static_cast<size_t>(*spatial)) return false;
        *out = *values;
        return true;
      };
      char* end = nullptr;
      const std::string alpha = field("alpha"), beta = field("beta"), scalar = field("scalar");
      operation.alpha = std::strtod(alpha.c_str(), &end);
      const bool alpha_ok = !alpha.empty() && end == alpha.c_str() + alpha.size();
      operation.beta = std::strtod(beta.c_str(), &end);
      const bool beta_ok = !beta.empty() && end == beta.c_str() + beta.size();
      if (!spatial_values("pre_pad", 0, &operation.pre_pad) ||
          !spatial_values("post_pad", 0, &operation.post_pad) ||
          !spatial_values("stride", 1, &operation.stride) ||
          !spatial_values("dilation", 1, &operation.dilation) || !alpha_ok || !beta_ok ||
          (scalar != "f32" && scalar != "f64")) {
        return refuse("bad line: " + line);
      }
      operation.double_scalars = scalar == "f64";
      graph.ops.push_back(std::move(operation));
    } else {
      return refuse("bad line: " + line);
    }
  }
  if (graph.ops.empty()) return refuse("it has no operations");
  // Outputs, and which of them the graph also reads (beta != 0).
  for (const GraphOperation& operation : graph.ops) {
    for (int i = 0; i < 3; ++i) {
      GraphTensor& tensor = graph.tensors[operation.tensors[i]];
      if (!operation.kind->roles[i].output) continue;
      tensor.output = true;
      tensor.read = operation.beta != 0;
    }
  }
  std::vector<size_t> outputs;
  uint64_t total = 0;
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    if (graph.tensors[i].is_virtual) continue;
    if (graph.tensors[i].output) outputs.push_back(i);
    total += graph.tensors[i].bytes;
  }
  if (total > kMaxTotalBytes) {
    return refuse(fmt::format("its tensors in memory take {} bytes, more than replay holds ({})",
                              total, kMaxTotalBytes));
  }
  if (outputs.size() != 1) {
    return refuse(
        fmt::format("it has {} outputs in memory; replay compares exactly one", outputs.size()));
  }
  graph.output = outputs.front();
  return graph;
}

// ---- building it through the backend API ----------------------------------------------------

// Every descriptor made for one replay, destroyed with it (the handle last).
class Builder {
 public:
  explicit Builder(const CudnnBackend& cudnn) : cudnn_(cudnn) {}
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;
  ~Builder() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      cudnn_.cudnnBackendDestroyDescriptor(*it);
    }
    if (handle_ != nullptr) cudnn_.cudnnDestroy(handle_);
  }

  cudnnHandle_t handle() const { return handle_; }

  Status CreateHandle() { return Check("cudnnCreate", cudnn_.cudnnCreate(&handle_)); }

  // A new descriptor of `type`, or null with `*status` set.
  cudnnBackendDescriptor_t Create(cudnnBackendDescriptorType_t type, Status* status) {
    cudnnBackendDescriptor_t descriptor = nullptr;
    *status = Check("cudnnBackendCreateDescriptor",
                    cudnn_.cudnnBackendCreateDescriptor(type, &descriptor));
    if (!status->ok()) return nullptr;
    made_.push_back(descriptor);
    return descriptor;
  }

  template <typename T>
  Status Set(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t count, const T* values) {
    return Check(fmt::format("cudnnBackendSetAttribute({})", static_cast<int>(name)).c_str(),
                 cudnn_.cudnnBackendSetAttribute(descriptor, name, type, count, values));
  }

  Status Finalize(cudnnBackendDescriptor_t descriptor, const char* what) {
    return Check(fmt::format("cudnnBackendFinalize({})", what).c_str(),
                 cudnn_.cudnnBackendFinalize(descriptor));
  }

  Status Get(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* values) {
    return Check(fmt::format("cudnnBackendGetAttribute({})", static_cast<int>(name)).c_str(),
                 cudnn_.cudnnBackendGetAttribute(descriptor, name, type, requested, count, values));
  }

 private:
  Status Check(const char* api, cudnnStatus_t status) const {
    return status == CUDNN_STATUS_SUCCESS ? Status::Ok() : Status::Error(cudnn_.Error(api, status));
  }

  const CudnnBackend& cudnn_;
  cudnnHandle_t handle_ = nullptr;
  std::vector<cudnnBackendDescriptor_t> made_;
};

// Runs `steps` (each returning a Status) in order until one fails.
template <typename... Steps>
Status InOrder(Steps&&... steps) {
  Status status = Status::Ok();
  ((status.ok() ? (status = steps(), 0) : 0), ...);
  return status;
}

StatusOr<cudnnBackendDescriptor_t> BuildTensor(Builder& b, const GraphTensor& t) {
  Status status = Status::Ok();
  cudnnBackendDescriptor_t d = b.Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &status);
  if (d == nullptr) return status;
  const auto rank = static_cast<int64_t>(t.dims.size());
  const bool is_virtual = t.is_virtual;
  status = InOrder(
      [&] { return b.Set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.dtype); },
      [&] { return b.Set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, t.dims.data()); },
      [&] { return b.Set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, t.strides.data()); },
      [&] { return b.Set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid); },
      [&] { return b.Set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &t.alignment); },
      [&] {
        return is_virtual
                   ? b.Set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual)
                   : Status::Ok();
      },
      [&] { return b.Finalize(d, "tensor"); });
  if (!status.ok()) return status.Prefixed("tensor " + t.role);
  return d;
}

StatusOr<cudnnBackendDescriptor_t> BuildOperation(
    Builder& b, const GraphOperation& o, const std::vector<cudnnBackendDescriptor_t>& tensors) {
  Status status = Status::Ok();
  cudnnBackendDescriptor_t conv = b.Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &status);
  if (conv == nullptr) return status;
  status = InOrder(
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &o.spatial);
      },
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &o.comp);
      },
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1,
                     &o.mode);
      },
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, o.spatial,
                     o.pre_pad.data());
      },
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, o.spatial,
                     o.post_pad.data());
      },
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, o.spatial,
                     o.stride.data());
      },
      [&] {
        return b.Set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, o.spatial,
                     o.dilation.data());
      },
      [&] { return b.Finalize(conv, "convolution"); });
  if (!status.ok()) return status.Prefixed(std::string(o.kind->name) + " convolution descriptor");
  cudnnBackendDescriptor_t d = b.Create(o.kind->type, &status);
  if (d == nullptr) return status;
  for (int i = 0; i < 3 && status.ok(); ++i) {
    status = b.Set(d, o.kind->roles[i].attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &tensors[o.tensors[i]]);
  }
  const float alpha_f = static_cast<float>(o.alpha), beta_f = static_cast<float>(o.beta);
  status = InOrder([&] { return status; },
                   [&] { return b.Set(d, o.kind->conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv); },
                   [&] {
                     return o.double_scalars
                                ? b.Set(d, o.kind->alpha, CUDNN_TYPE_DOUBLE, 1, &o.alpha)
                                : b.Set(d, o.kind->alpha, CUDNN_TYPE_FLOAT, 1, &alpha_f);
                   },
                   [&] {
                     return o.double_scalars ? b.Set(d, o.kind->beta, CUDNN_TYPE_DOUBLE, 1, &o.beta)
                                             : b.Set(d, o.kind->beta, CUDNN_TYPE_FLOAT, 1, &beta_f);
                   },
                   [&] { return b.Finalize(d, o.kind->name); });
  if (!status.ok()) return status.Prefixed(o.kind->name);
  return d;
}

// The finalized operation graph of `graph` on `b`'s handle.
StatusOr<cudnnBackendDescriptor_t> BuildGraph(Builder& b, const Graph& graph) {
  std::vector<cudnnBackendDescriptor_t> tensors, ops;
  for (const GraphTensor& tensor : graph.tensors) {
    StatusOr<cudnnBackendDescriptor_t> built = BuildTensor(b, tensor);
    if (!built.ok()) return built.status();
    tensors.push_back(*built);
  }
  for (const GraphOperation& operation : graph.ops) {
    StatusOr<cudnnBackendDescriptor_t> built = BuildOperation(b, operation, tensors);
    if (!built.ok()) return built.status();
    ops.push_back(*built);
  }
  Status status = Status::Ok();
  cudnnBackendDescriptor_t d = b.Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &status);
  if (d == nullptr) return status;
  cudnnHandle_t handle = b.handle();
  status = InOrder(
      [&] {
        return b.Set(d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     static_cast<int64_t>(ops.size()), ops.data());
      },
      [&] { return b.Set(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle); },
      [&] { return b.Finalize(d, "operation graph"); });
  if (!status.ok()) return status;
  return d;
}

// One engine made ready to run: its plan, variant pack and workspace.
struct Candidate {
  cudnnBackendDescriptor_t plan = nullptr;
  cudnnBackendDescriptor_t pack = nullptr;
  std::optional<DeviceBuffer> workspace;
  format::Determinism determinism = format::Determinism::kUnknown;
};

// Engine `index` of `graph` with `knobs` (none: the engine's defaults), its plan and its
// variant pack over `uids` / `pointers`; the error says why the library refuses it.
StatusOr<Candidate> BuildCandidate(Builder& b, const Driver& driver, cudnnBackendDescriptor_t graph,
                                   int64_t index, const std::vector<format::Knob>& knobs,
                                   const std::vector<int64_t>& uids,
                                   const std::vector<void*>& pointers) {
  Candidate candidate;
  Status status = Status::Ok();
  cudnnBackendDescriptor_t engine = b.Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &status);
  if (engine == nullptr) return status;
  status = InOrder(
      [&] {
        return b.Set(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                     &graph);
      },
      [&] { return b.Set(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index); },
      [&] { return b.Finalize(engine, "engine"); });
  if (!status.ok()) return status;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t count = 0;
  if (b.Get(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
            CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes)
          .ok()) {
    candidate.determinism = format::Determinism::kDeterministic;
    for (int64_t i = 0; i < std::min<int64_t>(count, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) {
        candidate.determinism = format::Determinism::kNondeterministic;
      }
    }
  }
  std::vector<cudnnBackendDescriptor_t> choices;
  for (const format::Knob& knob : knobs) {
    cudnnBackendDescriptor_t choice = b.Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &status);
    if (choice == nullptr) return status;
    const auto type = static_cast<cudnnBackendKnobType_t>(knob.type);
    status = InOrder(
        [&] {
          return b.Set(choice, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type);
        },
        [&] {
          return b.Set(choice, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &knob.value);
        },
        [&] { return b.Finalize(choice, "knob choice"); });
    if (!status.ok()) return status.Prefixed(fmt::format("knob {}={}", knob.type, knob.value));
    choices.push_back(choice);
  }
  cudnnBackendDescriptor_t config = b.Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &status);
  if (config == nullptr) return status;
  status = InOrder(
      [&] {
        return b.Set(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                     &engine);
      },
      [&] {
        return choices.empty()
                   ? Status::Ok()
                   : b.Set(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                           static_cast<int64_t>(choices.size()), choices.data());
      },
      [&] { return b.Finalize(config, "engine config"); });
  if (!status.ok()) return status;
  candidate.plan = b.Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &status);
  if (candidate.plan == nullptr) return status;
  cudnnHandle_t handle = b.handle();
  int64_t workspace_bytes = 0;
  status = InOrder(
      [&] {
        return b.Set(candidate.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                     &handle);
      },
      [&] {
        return b.Set(candidate.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
      },
      [&] { return b.Finalize(candidate.plan, "execution plan"); },
      [&] {
        return b.Get(candidate.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                     &count, &workspace_bytes);
      });
  if (!status.ok()) return status;
  if (workspace_bytes < 0 || static_cast<uint64_t>(workspace_bytes) > kMaxExtentBytes) {
    return Status::Error(fmt::format("the plan asks for a workspace of {} bytes", workspace_bytes));
  }
  void* workspace = nullptr;
  if (workspace_bytes > 0) {
    StatusOr<DeviceBuffer> allocated = Allocate(driver, static_cast<size_t>(workspace_bytes));
    if (!allocated.ok()) return allocated.status();
    workspace = allocated->pointer();
    candidate.workspace.emplace(std::move(*allocated));
  }
  candidate.pack = b.Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &status);
  if (candidate.pack == nullptr) return status;
  status = InOrder(
      [&] {
        return b.Set(candidate.pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                     static_cast<int64_t>(uids.size()), uids.data());
      },
      [&] {
        return b.Set(candidate.pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                     static_cast<int64_t>(pointers.size()), pointers.data());
      },
      [&] {
        return b.Set(candidate.pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                     &workspace);
      },
      [&] { return b.Finalize(candidate.pack, "variant pack"); });
  if (!status.ok()) return status;
  return candidate;
}

std::string EngineName(int64_t index, const std::vector<format::Knob>& knobs) {
  std::string name = fmt::format("engine {}", index);
  if (knobs.empty()) return name + " default knobs";
  name += " knobs";
  for (const format::Knob& knob : knobs) name += " " + libfacts::KnobText("cudnn", knob.type, knob.value);
  return name;
}

bool HandlesBackendExecute(const format::OpRecord& op) {
  return op.kind == format::OpKind::kCudnnBackendExecute && op.name == "cudnnBackendExecute";
}

StatusOr<OpReplayReport> ReplayBackendExecute(format::TraceReader& reader,
                                              const format::OpRecord& op,
                                              const OpReplayOptions& options) {
  StatusOr<Graph> parsed = ParseGraph(op);
  if (!parsed.ok()) return parsed.status();
  const Graph& graph = *parsed;
  if (!op.algorithm || op.algorithm->id < 0) {
    return Status::Error(fmt::format(
        "op {} (cudnnBackendExecute): cannot rebuild its plan: the trace does not say which "
        "engine it ran",
        op.sequence));
  }
  const format::AlgorithmChoice& recorded_engine = *op.algorithm;

  // The captured bytes of every tensor in memory the graph reads, and of its recorded output.
  ReplayBuffers buffers;
  std::vector<size_t> in_memory;  // indices into graph.tensors, in buffer order
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const GraphTensor& tensor = graph.tensors[i];
    if (tensor.is_virtual) continue;
    StatusOr<std::optional<std::string>> input =
        ReadCaptured(reader, op, "in", tensor.role, tensor.bytes);
    if (!input.ok()) return input.status();
    if (tensor.read && !*input) {
      return Status::Error(
          fmt::format("op {} was captured without its input {}", op.sequence, tensor.role));
    }
    if (i == graph.output) buffers.output = buffers.buffers.size();
    // An output the graph does not read: zeros keep every run alike.
    buffers.buffers.push_back({0, *input ? std::move(**input) : std::string(tensor.bytes, '\0')});
    in_memory.push_back(i);
  }
  const GraphTensor& output_tensor = graph.tensors[graph.output];
  buffers.output_bytes = output_tensor.bytes;
  buffers.output_dtype = output_tensor.dtype_text;
  StatusOr<std::optional<std::string>> output =
      ReadCaptured(reader, op, "out", output_tensor.role, output_tensor.bytes);
  if (!output.ok()) return output.status();
  buffers.recorded_output = std::move(*output);

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const CudnnBackend*> loaded_cudnn = LoadCudnnBackend();
  if (!loaded_cudnn.ok()) return loaded_cudnn.status();
  const CudnnBackend& cudnn = **loaded_cudnn;
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;

  std::vector<DeviceBuffer> memory;
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (size_t b = 0; b < in_memory.size(); ++b) {
    const GraphTensor& tensor = graph.tensors[in_memory[b]];
    StatusOr<DeviceBuffer> buffer = Allocate(driver, tensor.bytes);
    if (!buffer.ok()) return buffer.status();
    buffers.buffers[b].address = buffer->address();
    uids.push_back(tensor.uid);
    pointers.push_back(buffer->pointer());
    memory.push_back(std::move(*buffer));
  }

  Builder builder(cudnn);
  if (Status status = builder.CreateHandle(); !status.ok()) return status;
  StatusOr<cudnnBackendDescriptor_t> built = BuildGraph(builder, graph);
  if (!built.ok()) {
    return built.status().Prefixed(fmt::format("op {}: rebuilding its cuDNN graph", op.sequence));
  }
  const cudnnBackendDescriptor_t graph_descriptor = *built;

  OpReplayReport report;
  const std::string* fingerprint = TextOf(op, "fingerprint");
  report.problem = fingerprint != nullptr ? *fingerprint : "cudnn graph";
  report.output_role = output_tensor.role;
  report.output_bytes = output_tensor.bytes;

  const auto run_engine = [&](int64_t index, const std::vector<format::Knob>& knobs,
                              bool recorded) -> StatusOr<AlgorithmRuns> {
    AlgorithmRuns runs;
    runs.algo = index;
    runs.name = EngineName(index, knobs);
    runs.recorded = recorded;
    StatusOr<Candidate> candidate =
        BuildCandidate(builder, driver, graph_descriptor, index, knobs, uids, pointers);
    if (!candidate.ok()) {
      if (recorded) return candidate.status();
      runs.skipped = "not supported for this graph (" + candidate.status().message() + ")";
      return runs;
    }
    runs.determinism = recorded && recorded_engine.determinism != format::Determinism::kUnknown
                           ? recorded_engine.determinism
                           : candidate->determinism;
    if (!recorded && runs.determinism != format::Determinism::kDeterministic) {
      runs.skipped = "noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC";
      return runs;
    }
    return RunCandidate(
        driver, buffers, std::move(runs), options.repeat, [&]() -> std::optional<std::string> {
          const cudnnStatus_t status =
              cudnn.cudnnBackendExecute(builder.handle(), candidate->plan, candidate->pack);
          if (status == CUDNN_STATUS_SUCCESS) return std::nullopt;
          return cudnn.Error("cudnnBackendExecute", status);
        });
  };

  StatusOr<AlgorithmRuns> recorded = run_engine(recorded_engine.id, recorded_engine.knobs, true);
  if (!recorded.ok()) {
    return recorded.status().Prefixed(
        fmt::format("replaying op {} with {}", op.sequence,
                    EngineName(recorded_engine.id, recorded_engine.knobs)));
  }
  report.algorithms.push_back(std::move(*recorded));
  if (options.try_deterministic) {
    int64_t engines = 0, count = 0;
    if (Status status = builder.Get(graph_descriptor, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                    CUDNN_TYPE_INT64, 1, &count, &engines);
        !status.ok()) {
      return status.Prefixed(fmt::format("op {}: counting the graph's engines", op.sequence));
    }
    for (int64_t index = 0; index < std::min<int64_t>(engines, 1 << 12); ++index) {
      if (index == recorded_engine.id) continue;
      StatusOr<AlgorithmRuns> alternative = run_engine(index, {}, false);
      if (!alternative.ok()) {
        return alternative.status().Prefixed(
            fmt::format("replaying op {} with engine {}", op.sequence, index));
      }
      // Engines noted nondeterministic are no alternative: left out, as the legacy replayer
      // leaves out nondeterministic algorithms.
      if (alternative->determinism == format::Determinism::kNondeterministic) continue;
      report.algorithms.push_back(std::move(*alternative));
    }
  }
  return report;
}

}  // namespace

const Replayer kCudnnBackendReplayer = {HandlesBackendExecute, ReplayBackendExecute};

}  // namespace ndt::replay::internal
