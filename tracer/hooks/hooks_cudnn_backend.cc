// The cuDNN backend (graph) API hooks: cudnnBackendCreateDescriptor, DestroyDescriptor,
// SetAttribute, GetAttribute, Finalize and Execute.
//
// Backend descriptors are opaque, so the tracer keeps a shadow of each one (its type and the
// attributes that define the problem), fed by the SetAttribute calls it forwards and dropped
// at destroy. When an operation graph is finalized its problem is described canonically — the
// fingerprint: every operation in order, its tensors' dtypes, dims, strides and alignment, the
// convolution's parameters, alpha and beta; tensors are named by order of first appearance,
// never by address or raw uid — and that description follows the graph into heuristics,
// engines, engine configs and plans.
//
// The engine a plan runs is read through the real library (cudnnBackendGetAttribute on the
// plan's engine config and its engine: global index, knob choices, numerical and behaviour
// notes) at cudnnBackendFinalize of the plan, which is recorded as an op with the fingerprint
// and that AlgorithmChoice; each cudnnBackendExecute is recorded with the same choice, the
// variant pack's pointers (canonical) and digests of the tensors' exact extents. A heuristic
// config is recorded as picked by benchmark once its graph has been executed with another config
// in this process (TimedGraphs: the program timed cuDNN's candidates).
//
// Capture (NDTRACE_CAPTURE, tracer/capture.h): a chosen cudnnBackendExecute also stores every
// tensor of its variant pack that the graph reads before the call ("blob:in:<role>") and its
// outputs after it ("blob:out:<role>"), and the text argument "graph": the operation graph as
// it must be rebuilt (the fingerprint leaves out uids and scalar types), one line each:
//   cudnn_graph v1
//   tensor <role> uid=U dtype=f32 dims=2,16,12,12 strides=2304,144,12,1 align=16 virtual=0
//   op <kind> <attribute role>=<tensor role>... [mode=cross_correlation|convolution comp=f32
//      spatial=2 pre_pad=1,1 post_pad=1,1 stride=1,1 dilation=1,1] alpha=A beta=B scalar=f32|f64
// tensors in order of first appearance (their roles are those of the blobs), operations in the
// program's order, alpha and beta with 17 significant digits. The engine and its knobs are the
// op's AlgorithmChoice; the plan's workspace size is on the finalize op only.
//
// Policy. Enforce: engine configs whose engine is noted CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
// are moved out of the heuristics' results when the program reads CUDNN_ATTR_ENGINEHEUR_RESULTS
// (the returned array is partitioned, kept ones first, and the count reduced), and a plan with
// such an engine is refused at finalize with CUDNN_STATUS_NOT_SUPPORTED (frameworks then try
// their next config), and every plan of a graph gets the first deterministic engine config the
// graph was finalized with (SettlePlan), so that a benchmark's timing cannot choose. Pin: at plan
// finalize, the engine and knobs recorded for the fingerprint in the reference trace — the choice
// it used most for that fingerprint (PinTable), the one the program settled on after any autotuning
// — are rebuilt through the real library and set on the plan before it is finalized; when that
// cannot be done the program's own plan stands and the decision says why.
#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "libfacts/knob_names.h"
#include "tracer/capture.h"
#include "tracer/cudnn_types.h"
#include "tracer/library_support.h"
#include "tracer/policy.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {


// ---- the real library ---------------------------------------------------------------------

#define NDT_REAL_CUDNN(name) NDT_REAL_LIBRARY(::ndt::tracer::kCudnnSoname, name)

cudnnBackendDescriptor_t RealCreate(cudnnBackendDescriptorType_t type) {
  const auto create = NDT_REAL_CUDNN(cudnnBackendCreateDescriptor);
  cudnnBackendDescriptor_t descriptor = nullptr;
  if (create == nullptr || create(type, &descriptor) != CUDNN_STATUS_SUCCESS) return nullptr;
  return descriptor;
}

void RealDestroy(cudnnBackendDescriptor_t descriptor) {
  if (descriptor == nullptr) return;
  if (const auto destroy = NDT_REAL_CUDNN(cudnnBackendDestroyDescriptor)) destroy(descriptor);
}

bool RealGet(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* out) {
  const auto get = NDT_REAL_CUDNN(cudnnBackendGetAttribute);
  return get != nullptr && get(descriptor, name, type, requested, count, out) == CUDNN_STATUS_SUCCESS;
}

bool RealSet(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  const auto set = NDT_REAL_CUDNN(cudnnBackendSetAttribute);
  return set != nullptr && set(descriptor, name, type, count, values) == CUDNN_STATUS_SUCCESS;
}

bool RealFinalize(cudnnBackendDescriptor_t descriptor) {
  const auto finalize = NDT_REAL_CUDNN(cudnnBackendFinalize);
  return finalize != nullptr && finalize(descriptor) == CUDNN_STATUS_SUCCESS;
}

// ---- the shadow of the descriptors --------------------------------------------------------

struct TensorFacts {
  int64_t uid = 0;
  std::vector<int64_t> dims, strides;
  int64_t data_type = -1;
  int64_t alignment = 0;
  bool is_virtual = false;
};

struct ConvFacts {
  int64_t spatial_dims = 0;
  int64_t comp_type = -1;
  int64_t mode = -1;
  std::vector<int64_t> dilations, filter_strides, pre_paddings, post_paddings;
};

// A tensor of the problem, with the role its first operation gives it.
struct ProblemTensor {
  std::string role;  // "x", "w", "y"; "op<N>.<role>" for the N-th operation (N >= 1)
  TensorFacts facts;
  bool output = false;
  size_t op_index = 0;
};

// The problem an operation graph describes; shared by everything built from the graph.
struct Problem {
  std::string fingerprint;  // empty: the graph holds operations the tracer does not describe
  std::string graph_text;   // the "graph" argument of a captured execute; empty with fingerprint
  std::vector<ProblemTensor> tensors;
  std::vector<bool> beta_nonzero;  // per op: the output is also read
  cudnnBackendDescriptor_t graph = nullptr;  // the program's descriptor, while it lives
};

// The operations the tracer describes: their attribute for each tensor role, and which are
// outputs.
struct OperationKind {
  cudnnBackendDescriptorType_t type;
  const char* name;
  struct Role {
    cudnnBackendAttributeName_t attribute;
    const char* name;
    bool output;
  };
  std::vector<Role> roles;
  cudnnBackendAttributeName_t conv, alpha, beta;
};

const std::vector<OperationKind>& OperationKinds() {
  static const auto* kinds = new std::vector<OperationKind>{
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       "conv_fwd",
       {{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, "x", false},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, "w", false},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, "y", true}},
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       "conv_bwd_filter",
       {{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, "x", false},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, "dy", false},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, "dw", true}},
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       "conv_bwd_data",
       {{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, "w", false},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, "dy", false},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, "dx", true}},
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
  };
  return *kinds;
}

const OperationKind* FindOperationKind(int64_t type) {
  for (const OperationKind& kind : OperationKinds()) {
    if (kind.type == type) return &kind;
  }
  return nullptr;
}

struct OperationFacts {
  const OperationKind* kind = nullptr;
  std::map<std::string, TensorFacts> tensors;  // by role name
  std::optional<ConvFacts> conv;
  double alpha = 1.0, beta = 0.0;
  bool double_scalars = false;  // alpha / beta were set as CUDNN_TYPE_DOUBLE
};

// What a finalized plan runs.
struct PlanFacts {
  std::shared_ptr<const Problem> problem;  // null when unknown
  std::optional<format::AlgorithmChoice> choice;
  std::string numerical_notes, behavior_notes;
  int64_t workspace_bytes = 0;
  uint64_t stream = 0;
};

struct Shadow {
  int64_t type = -1;
  TensorFacts tensor;                       // TENSOR
  ConvFacts conv;                           // CONVOLUTION
  OperationFacts operation;                 // OPERATION_*
  std::vector<OperationFacts> ops;          // OPERATIONGRAPH
  bool ops_known = true;                    // OPERATIONGRAPH: every op is described
  cudnnHandle_t handle = nullptr;           // OPERATIONGRAPH, EXECUTION_PLAN
  std::shared_ptr<const Problem> problem;   // OPERATIONGRAPH (finalized), ENGINEHEUR, ENGINE,
                                            // ENGINECFG, EXECUTION_PLAN
  format::ChoiceSource source = format::ChoiceSource::kRequested;  // ENGINECFG
  cudnnBackendDescriptor_t config = nullptr;                       // EXECUTION_PLAN, as set
  std::shared_ptr<const PlanFacts> plan;                           // EXECUTION_PLAN, finalized
  std::vector<cudnnBackendDescriptor_t> owned;  // EXECUTION_PLAN: made by the pin policy
  std::vector<int64_t> uids;                    // VARIANT_PACK
  std::vector<uint64_t> pointers;
};

// Every live descriptor's shadow. Never destroyed: hooks may run during exit.
struct ShadowTable {
  std::mutex mutex;
  std::unordered_map<const void*, Shadow> shadows;
};
ShadowTable& Shadows() {
  static auto* table = new ShadowTable();
  return *table;
}

template <typename Fn>
auto WithShadow(const void* descriptor, Fn&& fn) -> decltype(fn(static_cast<Shadow*>(nullptr))) {
  ShadowTable& table = Shadows();
  std::lock_guard<std::mutex> lock(table.mutex);
  auto found = table.shadows.find(descriptor);
  return fn(found == table.shadows.end() ? nullptr : &found->second);
}

// ---- fingerprints -------------------------------------------------------------------------

std::string Join(const std::vector<int64_t>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(values[i]);
  }
  return text;
}

const char* DataTypeName(int64_t type) {
  switch (type) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_DOUBLE: return "f64";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_INT8: return "i8";
    case CUDNN_DATA_INT32: return "i32";
    case CUDNN_DATA_INT64: return "i64";
    case CUDNN_DATA_UINT8: return "u8";
    case CUDNN_DATA_BOOLEAN: return "bool";
    case CUDNN_DATA_FP8_E4M3: return "f8e4m3";
    case CUDNN_DATA_FP8_E5M2: return "f8e5m2";
    default: return nullptr;
  }
}

std::string DataTypeText(int64_t type) {
  const char* name = DataTypeName(type);
  return name != nullptr ? name : "dtype" + std::to_string(type);
}

uint64_t ElementBytes(int64_t type) {
  return format::DTypeBytes(CudnnDType(type));
}

// The bytes from a tensor's first element to one past its last, from dims and strides.
uint64_t ExtentBytes(const TensorFacts& tensor) {
  if (tensor.dims.empty() || tensor.dims.size() != tensor.strides.size()) return 0;
  uint64_t last = 0;
  for (size_t i = 0; i < tensor.dims.size(); ++i) {
    if (tensor.dims[i] < 1 || tensor.strides[i] < 0) return 0;
    last += static_cast<uint64_t>(tensor.dims[i] - 1) * static_cast<uint64_t>(tensor.strides[i]);
  }
  return (last + 1) * ElementBytes(tensor.data_type);
}

std::string ScalarText(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

std::string ExactScalarText(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// The "graph" argument of `problem`'s operations `ops` (format in the essay above).
std::string GraphText(const Problem& problem, const std::vector<OperationFacts>& ops) {
  std::string text = "cudnn_graph v1\n";
  std::map<int64_t, std::string> roles;  // uid -> the role of its first appearance
  for (const ProblemTensor& tensor : problem.tensors) {
    const TensorFacts& facts = tensor.facts;
    roles.emplace(facts.uid, tensor.role);
    text += "tensor " + tensor.role + " uid=" + std::to_string(facts.uid) +
            " dtype=" + DataTypeText(facts.data_type) + " dims=" + Join(facts.dims) +
            " strides=" + Join(facts.strides) + " align=" + std::to_string(facts.alignment) +
            " virtual=" + (facts.is_virtual ? "1" : "0") + "\n";
  }
  for (const OperationFacts& op : ops) {
    text += std::string("op ") + op.kind->name;
    for (const OperationKind::Role& role : op.kind->roles) {
      auto found = op.tensors.find(role.name);
      if (found == op.tensors.end()) continue;
      text += std::string(" ") + role.name + "=" + roles[found->second.uid];
    }
    if (op.conv) {
      const ConvFacts& conv = *op.conv;
      text += std::string(" mode=") +
              (conv.mode == CUDNN_CONVOLUTION ? "convolution" : "cross_correlation") +
              " comp=" + DataTypeText(conv.comp_type) +
              " spatial=" + std::to_string(conv.spatial_dims) +
              " pre_pad=" + Join(conv.pre_paddings) + " post_pad=" + Join(conv.post_paddings) +
              " stride=" + Join(conv.filter_strides) + " dilation=" + Join(conv.dilations);
    }
    text += " alpha=" + ExactScalarText(op.alpha) + " beta=" + ExactScalarText(op.beta) +
            " scalar=" + (op.double_scalars ? "f64" : "f32") + "\n";
  }
  return text;
}

// The problem of a graph whose operations are `ops` (in the order the program gave them).
Problem Describe(const std::vector<OperationFacts>& ops, bool ops_known) {
  Problem problem;
  std::map<int64_t, std::string> names;  // uid -> canonical name, by first appearance
  std::string text;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OperationFacts& op = ops[i];
    if (i > 0) text += "; ";
    text += op.kind->name;
    text += "(";
    bool first = true;
    for (const OperationKind::Role& role : op.kind->roles) {
      auto found = op.tensors.find(role.name);
      if (found == op.tensors.end()) continue;
      const TensorFacts& tensor = found->second;
      auto [name, added] = names.emplace(tensor.uid, "t" + std::to_string(names.size()));
      if (added) {
        const std::string prefix = i == 0 ? "" : "op" + std::to_string(i) + ".";
        problem.tensors.push_back({prefix + role.name, tensor, role.output, i});
      }
      text += first ? "" : " ";
      first = false;
      text += std::string(role.name) + "=" + name->second + ":" + DataTypeText(tensor.data_type) +
              "[" + Join(tensor.dims) + "]/[" + Join(tensor.strides) + "]@" +
              std::to_string(tensor.alignment) + (tensor.is_virtual ? ":virtual" : "");
    }
    if (op.conv) {
      const ConvFacts& conv = *op.conv;
      text += conv.mode == CUDNN_CONVOLUTION ? " convolution" : " cross_correlation";
      text += " comp=" + DataTypeText(conv.comp_type) + " pre_pad=" + Join(conv.pre_paddings) +
              " post_pad=" + Join(conv.post_paddings) + " stride=" + Join(conv.filter_strides) +
              " dilation=" + Join(conv.dilations);
    }
    text += " alpha=" + ScalarText(op.alpha) + " beta=" + ScalarText(op.beta) + ")";
    problem.beta_nonzero.push_back(op.beta != 0.0);
  }
  if (ops_known && !ops.empty()) {
    problem.fingerprint = "cudnn graph: " + text;
    problem.graph_text = GraphText(problem, ops);
  }
  return problem;
}

// ---- reading what the library chose -------------------------------------------------------

std::string NumericalNoteName(int64_t note) {
  switch (note) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return "TENSOR_CORE";
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return "DOWN_CONVERT_INPUTS";
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return "REDUCED_PRECISION_REDUCTION";
    case CUDNN_NUMERICAL_NOTE_FFT: return "FFT";
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return "NONDETERMINISTIC";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD: return "WINOGRAD";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: return "WINOGRAD_TILE_4x4";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: return "WINOGRAD_TILE_6x6";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return "WINOGRAD_TILE_13x13";
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: return "STRICT_NAN_PROP";
    default: return std::to_string(note);
  }
}

std::string BehaviorNoteName(int64_t note) {
  switch (note) {
    case CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: return "RUNTIME_COMPILATION";
    case CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER: return "REQUIRES_FILTER_INT8x32_REORDER";
    case CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER: return "REQUIRES_BIAS_INT8x32_REORDER";
    case CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API: return "SUPPORTS_CUDA_GRAPH_NATIVE_API";
    case CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY: return "CUBLASLT_DEPENDENCY";
    default: return std::to_string(note);
  }
}

// The engine of a finalized engine config, its knobs and notes.
struct ConfigChoice {
  format::AlgorithmChoice choice;
  std::string numerical_notes, behavior_notes;  // names, space-separated
};

std::optional<ConfigChoice> ReadConfig(cudnnBackendDescriptor_t config) {
  if (config == nullptr) return std::nullopt;
  ConfigChoice read;
  read.choice.library = "cudnn";
  cudnnBackendDescriptor_t engine = RealCreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (engine == nullptr) return std::nullopt;
  int64_t count = 0;
  int64_t index = -1;
  const bool have_engine =
      RealGet(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
              &engine) &&
      RealGet(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index);
  if (!have_engine) {
    RealDestroy(engine);
    return std::nullopt;
  }
  read.choice.id = index;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (RealGet(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
              CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes)) {
    read.choice.determinism = format::Determinism::kDeterministic;
    for (int64_t i = 0; i < std::min<int64_t>(count, CUDNN_NUMERICAL_NOTE_TYPE_COUNT); ++i) {
      if (!read.numerical_notes.empty()) read.numerical_notes += " ";
      read.numerical_notes += NumericalNoteName(notes[i]);
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) {
        read.choice.determinism = format::Determinism::kNondeterministic;
      }
    }
  }
  cudnnBackendBehaviorNote_t behaviors[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (RealGet(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
              CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count, behaviors)) {
    for (int64_t i = 0; i < std::min<int64_t>(count, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i) {
      if (!read.behavior_notes.empty()) read.behavior_notes += " ";
      read.behavior_notes += BehaviorNoteName(behaviors[i]);
    }
  }
  RealDestroy(engine);

  // As cudnn-frontend reads them: one knob descriptor per possible knob type.
  std::vector<cudnnBackendDescriptor_t> knobs;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    cudnnBackendDescriptor_t knob = RealCreate(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    if (knob == nullptr) break;
    knobs.push_back(knob);
  }
  if (RealGet(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              static_cast<int64_t>(knobs.size()), &count, knobs.data())) {
    for (int64_t i = 0; i < std::min<int64_t>(count, static_cast<int64_t>(knobs.size())); ++i) {
      cudnnBackendKnobType_t type;
      int64_t value = 0, one = 0;
      if (RealGet(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &one,
                  &type) &&
          RealGet(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &one,
                  &value)) {
        read.choice.knobs.push_back({static_cast<int64_t>(type), value});
      }
    }
  }
  for (cudnnBackendDescriptor_t knob : knobs) RealDestroy(knob);
  read.choice.name = "engine " + std::to_string(index);
  if (!read.numerical_notes.empty()) read.choice.name += " numerical_notes=" + read.numerical_notes;
  if (!read.behavior_notes.empty()) read.choice.name += " behavior_notes=" + read.behavior_notes;
  return read;
}

std::string ChoiceText(const format::AlgorithmChoice& choice) {
  std::string text = "cudnn engine " + std::to_string(choice.id);
  if (!choice.knobs.empty()) {
    text += " knobs";
    for (const format::Knob& knob : choice.knobs) {
      text += " " + libfacts::KnobText("cudnn", knob.type, knob.value);
    }
  }
  if (choice.determinism == format::Determinism::kNondeterministic) text += " (nondeterministic)";
  return text;
}

bool SameEngine(const format::AlgorithmChoice& a, const format::AlgorithmChoice& b) {
  return a.id == b.id && a.knobs == b.knobs;
}

// Builds an engine config for `choice` on `graph` through the real library and sets it on
// `plan`. Empty on success (the new descriptors are appended to `owned`), else why not.
std::string SetPinnedConfig(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t graph,
                            const format::AlgorithmChoice& choice,
                            std::vector<cudnnBackendDescriptor_t>* owned) {
  std::vector<cudnnBackendDescriptor_t> made;
  const auto fail = [&](const std::string& why) {
    for (cudnnBackendDescriptor_t descriptor : made) RealDestroy(descriptor);
    return why;
  };
  cudnnBackendDescriptor_t engine = RealCreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (engine == nullptr) return fail("cannot create an engine descriptor");
  made.push_back(engine);
  const int64_t index = choice.id;
  if (!RealSet(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &graph) ||
      !RealSet(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index) ||
      !RealFinalize(engine)) {
    return fail("this cuDNN has no engine " + std::to_string(index) + " for the graph");
  }
  std::vector<cudnnBackendDescriptor_t> knobs;
  for (const format::Knob& knob : choice.knobs) {
    cudnnBackendDescriptor_t descriptor = RealCreate(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    if (descriptor == nullptr) return fail("cannot create a knob choice descriptor");
    made.push_back(descriptor);
    const auto type = static_cast<cudnnBackendKnobType_t>(knob.type);
    const int64_t value = knob.value;
    if (!RealSet(descriptor, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type) ||
        !RealSet(descriptor, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value) ||
        !RealFinalize(descriptor)) {
      return fail("knob " + std::to_string(knob.type) + "=" + std::to_string(knob.value) +
                  " is not accepted");
    }
    knobs.push_back(descriptor);
  }
  cudnnBackendDescriptor_t config = RealCreate(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (config == nullptr) return fail("cannot create an engine config descriptor");
  made.push_back(config);
  if (!RealSet(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine) ||
      !RealSet(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               static_cast<int64_t>(knobs.size()), knobs.data()) ||
      !RealFinalize(config)) {
    return fail("the engine does not accept the recorded knobs");
  }
  if (!RealSet(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &config)) {
    return fail("the plan does not accept the engine config");
  }
  owned->insert(owned->end(), made.begin(), made.end());
  return "";
}

// ---- shadowing SetAttribute ---------------------------------------------------------------

std::vector<int64_t> Ints(cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  if (type != CUDNN_TYPE_INT64 || count <= 0 || values == nullptr) return {};
  const auto* ints = static_cast<const int64_t*>(values);
  return std::vector<int64_t>(ints, ints + count);
}

template <typename T>
std::optional<T> One(cudnnBackendAttributeType_t type, cudnnBackendAttributeType_t expected,
                     int64_t count, const void* values) {
  if (type != expected || count < 1 || values == nullptr) return std::nullopt;
  T value;
  std::memcpy(&value, values, sizeof(T));
  return value;
}

std::optional<double> Scalar(cudnnBackendAttributeType_t type, int64_t count,
                             const void* values) {
  if (auto f = One<float>(type, CUDNN_TYPE_FLOAT, count, values)) return *f;
  return One<double>(type, CUDNN_TYPE_DOUBLE, count, values);
}

const void* DescriptorValue(cudnnBackendAttributeType_t type, int64_t count, const void* values,
                            int64_t index = 0) {
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || count <= index || values == nullptr) {
    return nullptr;
  }
  return static_cast<void* const*>(values)[index];
}

// Updates the shadow of `descriptor` after a successful SetAttribute. Holds the table's lock.
void ShadowSet(std::unordered_map<const void*, Shadow>& shadows, const void* descriptor,
               cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
               const void* values) {
  auto found = shadows.find(descriptor);
  if (found == shadows.end()) return;
  Shadow& d = found->second;
  const auto other = [&](int64_t index = 0) -> const Shadow* {
    auto it = shadows.find(DescriptorValue(type, count, values, index));
    return it == shadows.end() ? nullptr : &it->second;
  };
  if (const OperationKind* kind = FindOperationKind(d.type)) {
    d.operation.kind = kind;
    for (const OperationKind::Role& role : kind->roles) {
      if (role.attribute != name) continue;
      if (const Shadow* tensor = other()) d.operation.tensors[role.name] = tensor->tensor;
    }
    if (name == kind->conv) {
      if (const Shadow* conv = other()) d.operation.conv = conv->conv;
    }
    if (name == kind->alpha) d.operation.alpha = Scalar(type, count, values).value_or(1.0);
    if (name == kind->beta) d.operation.beta = Scalar(type, count, values).value_or(0.0);
    if (name == kind->alpha || name == kind->beta) {
      d.operation.double_scalars = type == CUDNN_TYPE_DOUBLE;
    }
    return;
  }
  switch (name) {
    case CUDNN_ATTR_TENSOR_DIMENSIONS: d.tensor.dims = Ints(type, count, values); break;
    case CUDNN_ATTR_TENSOR_STRIDES: d.tensor.strides = Ints(type, count, values); break;
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
      d.tensor.uid = One<int64_t>(type, CUDNN_TYPE_INT64, count, values).value_or(0);
      break;
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
      d.tensor.alignment = One<int64_t>(type, CUDNN_TYPE_INT64, count, values).value_or(0);
      break;
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
      d.tensor.data_type =
          One<cudnnDataType_t>(type, CUDNN_TYPE_DATA_TYPE, count, values).value_or(
              static_cast<cudnnDataType_t>(-1));
      break;
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
      d.tensor.is_virtual = One<bool>(type, CUDNN_TYPE_BOOLEAN, count, values).value_or(false);
      break;
    case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
      d.conv.spatial_dims = One<int64_t>(type, CUDNN_TYPE_INT64, count, values).value_or(0);
      break;
    case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
      d.conv.comp_type = One<cudnnDataType_t>(type, CUDNN_TYPE_DATA_TYPE, count, values)
                             .value_or(static_cast<cudnnDataType_t>(-1));
      break;
    case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
      d.conv.mode = One<cudnnConvolutionMode_t>(type, CUDNN_TYPE_CONVOLUTION_MODE, count, values)
                        .value_or(static_cast<cudnnConvolutionMode_t>(-1));
      break;
    case CUDNN_ATTR_CONVOLUTION_DILATIONS: d.conv.dilations = Ints(type, count, values); break;
    case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
      d.conv.filter_strides = Ints(type, count, values);
      break;
    case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS: d.conv.pre_paddings = Ints(type, count, values); break;
    case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
      d.conv.post_paddings = Ints(type, count, values);
      break;
    case CUDNN_ATTR_OPERATIONGRAPH_OPS:
      d.ops.clear();
      d.ops_known = true;
      for (int64_t i = 0; i < count; ++i) {
        const Shadow* op = other(i);
        if (op == nullptr || op->operation.kind == nullptr) {
          d.ops_known = false;
          continue;
        }
        d.ops.push_back(op->operation);
      }
      break;
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
    case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
      d.handle = One<cudnnHandle_t>(type, CUDNN_TYPE_HANDLE, count, values).value_or(nullptr);
      break;
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH:
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
      if (const Shadow* graph = other()) d.problem = graph->problem;
      break;
    case CUDNN_ATTR_ENGINECFG_ENGINE:
      if (const Shadow* engine = other()) d.problem = engine->problem;
      d.source = format::ChoiceSource::kRequested;
      break;
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
      d.config = const_cast<void*>(DescriptorValue(type, count, values));
      if (const Shadow* config = other()) d.problem = config->problem;
      break;
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS: d.uids = Ints(type, count, values); break;
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
      d.pointers.clear();
      if (type == CUDNN_TYPE_VOID_PTR && values != nullptr) {
        for (int64_t i = 0; i < count; ++i) {
          d.pointers.push_back(reinterpret_cast<uint64_t>(static_cast<void* const*>(values)[i]));
        }
      }
      break;
    default:
      break;
  }
}

// ---- recording ----------------------------------------------------------------------------

// The fingerprint and the choice. Only facts that stay equal when the same problem runs on
// another engine are arguments (a diff compares arguments before choices): the engine's
// notes are in the choice's name, the workspace size only on the finalize op.
void AddChoiceArguments(format::OpRecord& op, const PlanFacts& plan) {
  if (plan.problem != nullptr && !plan.problem->fingerprint.empty()) {
    op.args.push_back(TextArgument("fingerprint", plan.problem->fingerprint));
  }
  if (plan.choice) op.algorithm = plan.choice;
}

format::PolicyDecisionRecord Decision(uint64_t sequence, std::string action,
                                      std::optional<format::AlgorithmChoice> from,
                                      std::optional<format::AlgorithmChoice> to, bool applied) {
  format::PolicyDecisionRecord decision;
  decision.op_sequence = sequence;
  decision.library = "cudnn";
  decision.action = std::move(action);
  decision.from_choice = std::move(from);
  decision.to_choice = std::move(to);
  decision.applied = applied;
  return decision;
}

// The plan's facts and its config's, read under the table's lock.
struct PlanRequest {
  std::shared_ptr<const Problem> problem;
  cudnnBackendDescriptor_t config = nullptr;
  cudnnHandle_t handle = nullptr;
  format::ChoiceSource source = format::ChoiceSource::kRequested;
  bool graph_alive = false;  // the program's graph descriptor still exists
};

PlanRequest ReadPlanRequest(cudnnBackendDescriptor_t plan) {
  PlanRequest request;
  ShadowTable& table = Shadows();
  std::lock_guard<std::mutex> lock(table.mutex);
  auto found = table.shadows.find(plan);
  if (found == table.shadows.end()) return request;
  request.problem = found->second.problem;
  request.config = found->second.config;
  request.handle = found->second.handle;
  if (auto config = table.shadows.find(request.config); config != table.shadows.end()) {
    request.source = config->second.source;
  }
  if (request.problem != nullptr) {
    auto graph = table.shadows.find(request.problem->graph);
    request.graph_alive = graph != table.shadows.end() && graph->second.problem == request.problem;
  }
  return request;
}

// The pin policy at plan finalize: sets the recorded engine config on `plan` when it can
// (its descriptors are appended to `owned`) and returns the recorded choice then; says why
// not otherwise.
std::optional<format::AlgorithmChoice> PinPlan(Session& session, uint64_t sequence,
                                               cudnnBackendDescriptor_t plan,
                                               const PlanRequest& request,
                                               const std::optional<ConfigChoice>& asked,
                                               std::vector<cudnnBackendDescriptor_t>* owned) {
  const std::optional<format::AlgorithmChoice> from =
      asked ? std::optional(asked->choice) : std::nullopt;
  const std::string fingerprint = request.problem ? request.problem->fingerprint : "";
  if (fingerprint.empty()) {
    session.Decide(Decision(sequence,
                            "cannot pin a cudnn plan: the tracer does not describe its "
                            "operation graph",
                            from, std::nullopt, false));
    return std::nullopt;
  }
  const format::AlgorithmChoice* want =
      session.pins() != nullptr ? session.pins()->Choice(fingerprint) : nullptr;
  if (want == nullptr) {
    session.Decide(Decision(sequence,
                            "cannot pin a cudnn plan: the pin trace records no engine for " +
                                fingerprint,
                            from, std::nullopt, false));
    return std::nullopt;
  }
  const std::string mismatch =
      session.pins() != nullptr ? session.pins()->Mismatch(session.header(), "cudnn") : "";
  std::string why_not;
  if (!mismatch.empty()) {
    why_not = mismatch;
  } else if (asked && SameEngine(asked->choice, *want)) {
    return *want;  // the program asked for the recorded engine itself
  } else if (!request.graph_alive) {
    why_not = "the program has destroyed the operation graph";
  } else {
    why_not = SetPinnedConfig(plan, request.problem->graph, *want, owned);
  }
  if (!why_not.empty()) {
    session.Decide(Decision(sequence, "cannot pin " + ChoiceText(*want) + ": " + why_not, from,
                            *want, false));
    return std::nullopt;
  }
  return *want;
}

// Under enforce, the engine config each graph (by fingerprint) settled on: the first
// deterministic one a plan was finalized with in this process. Thread-safe; never destroyed.
class SettledEngines {
 public:
  static SettledEngines& Get() {
    static auto* settled = new SettledEngines();
    return *settled;
  }
  std::optional<format::AlgorithmChoice> Find(const std::string& fingerprint) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = choices_.find(fingerprint);
    if (found == choices_.end()) return std::nullopt;
    return found->second;
  }
  void Remember(const std::string& fingerprint, const format::AlgorithmChoice& choice) {
    std::lock_guard<std::mutex> lock(mutex_);
    choices_.try_emplace(fingerprint, choice);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, format::AlgorithmChoice> choices_;
};

// The graphs (by fingerprint) this process executed with more than one engine config. A program
// that times the candidates cuDNN's heuristics list and keeps the fastest (PyTorch with
// torch.backends.cudnn.benchmark=True, through cudnn-frontend) executes each of them; from the
// second on, the config a graph runs was picked by timing, not by the heuristics' order.
// Thread-safe; never destroyed.
class TimedGraphs {
 public:
  static TimedGraphs& Get() {
    static auto* timed = new TimedGraphs();
    return *timed;
  }
  // Notes that the graph `fingerprint` is executed with `config`; returns whether it has been
  // executed with another config before.
  bool Note(const std::string& fingerprint, const std::string& config) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, added] = graphs_.try_emplace(fingerprint, Graph{config, false});
    if (!added && it->second.first_config != config) it->second.timed = true;
    return it->second.timed;
  }

 private:
  struct Graph {
    std::string first_config;
    bool timed;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, Graph> graphs_;
};

// The enforce policy at plan finalize, after nondeterministic engines are refused: deterministic
// engines differ from one another in their results too, and a framework that benchmarks
// (cudnn.benchmark=True) picks among its plans by measured time, which varies from run to run.
// So every plan of a graph gets the engine config the graph settled on (SettledEngines): the
// framework's candidates all compute alike, whichever it times fastest. Returns that choice
// when it is set on `plan` (its descriptors appended to `owned`) or already is the program's;
// says why not otherwise.
std::optional<format::AlgorithmChoice> SettlePlan(Session& session, uint64_t sequence,
                                                  cudnnBackendDescriptor_t plan,
                                                  const PlanRequest& request,
                                                  const std::optional<ConfigChoice>& asked,
                                                  std::vector<cudnnBackendDescriptor_t>* owned) {
  if (!asked || request.problem == nullptr || request.problem->fingerprint.empty()) {
    return std::nullopt;
  }
  std::optional<format::AlgorithmChoice> settled =
      SettledEngines::Get().Find(request.problem->fingerprint);
  if (!settled || SameEngine(asked->choice, *settled)) return settled;
  settled->source = format::ChoiceSource::kEnforced;
  const std::string why_not =
      request.graph_alive ? SetPinnedConfig(plan, request.problem->graph, *settled, owned)
                          : "the program has destroyed the operation graph";
  if (why_not.empty()) return settled;
  session.Decide(Decision(sequence,
                          "cannot keep " + ChoiceText(*settled) + " for this graph: " + why_not,
                          asked->choice, *settled, false));
  return std::nullopt;
}

int64_t PlanWorkspace(cudnnBackendDescriptor_t plan) {
  int64_t bytes = 0, count = 0;
  RealGet(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, &bytes);
  return bytes;
}

// cudnnBackendFinalize of an execution plan, under the policy.
cudnnStatus_t FinalizePlan(Session& session, RealCall<cudnnStatus_t>& call,
                           cudnnBackendDescriptor_t descriptor) {
  const auto finalize = NDT_REAL_CUDNN(cudnnBackendFinalize);
  const PlanRequest request = ReadPlanRequest(descriptor);
  const uint64_t stream = CudnnHandleStream(request.handle);
  format::OpRecord op = session.BeginOp(format::OpKind::kOther, "cudnnBackendFinalize(plan)",
                                        session.StreamId(stream, false));
  std::optional<ConfigChoice> asked = ReadConfig(request.config);
  if (asked) asked->choice.source = request.source;
  PlanFacts facts;
  facts.problem = request.problem;
  facts.stream = stream;
  if (asked) {
    facts.choice = asked->choice;
    facts.numerical_notes = asked->numerical_notes;
    facts.behavior_notes = asked->behavior_notes;
  }
  const PolicyMode mode = session.policy().mode;

  if (mode == PolicyMode::kEnforce && asked &&
      asked->choice.determinism == format::Determinism::kNondeterministic) {
    session.Decide(Decision(op.sequence,
                            "refused to finalize a plan with " + ChoiceText(asked->choice),
                            asked->choice, std::nullopt, true));
    AddChoiceArguments(op, facts);
    session.EndOp(op, CUDNN_STATUS_NOT_SUPPORTED);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }

  // The engine config set in place of the program's: the pinned one, or under enforce the one
  // the graph settled on.
  std::vector<cudnnBackendDescriptor_t> owned;
  std::optional<format::AlgorithmChoice> substitute;
  if (mode == PolicyMode::kPin) {
    substitute = PinPlan(session, op.sequence, descriptor, request, asked, &owned);
  } else if (mode == PolicyMode::kEnforce) {
    substitute = SettlePlan(session, op.sequence, descriptor, request, asked, &owned);
  }
  const bool pin = mode == PolicyMode::kPin;
  cudnnStatus_t status = call.Run([&] { return finalize(descriptor); });
  if (!owned.empty()) {
    const std::string asked_text = asked ? ChoiceText(asked->choice) : "the program's config";
    if (status == CUDNN_STATUS_SUCCESS) {
      session.Decide(Decision(
          op.sequence,
          pin ? "pinned " + ChoiceText(*substitute) + " in place of " + asked_text
              : "kept " + ChoiceText(*substitute) + ", the first deterministic engine this "
                "process finalized for this graph, in place of " + asked_text +
                " (so that a benchmark's timing does not choose)",
          facts.choice, *substitute, true));
    } else {
      session.Decide(Decision(op.sequence,
                              (pin ? "cannot pin " : "cannot keep ") + ChoiceText(*substitute) +
                                  ": the plan does not finalize with it (status " +
                                  std::to_string(static_cast<int>(status)) + ")",
                              facts.choice, *substitute, false));
      RealSet(descriptor, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              1, &request.config);
      status = finalize(descriptor);
      for (cudnnBackendDescriptor_t made : owned) RealDestroy(made);
      owned.clear();
      substitute.reset();
    }
  }
  if (status == CUDNN_STATUS_SUCCESS) {
    if (!owned.empty()) {
      if (std::optional<ConfigChoice> ran = ReadConfig(owned.back())) {
        facts.choice = ran->choice;
        facts.numerical_notes = ran->numerical_notes;
        facts.behavior_notes = ran->behavior_notes;
      }
    }
    if (substitute && facts.choice) {
      facts.choice->source = pin ? format::ChoiceSource::kPinned : format::ChoiceSource::kEnforced;
    }
    if (mode == PolicyMode::kEnforce && facts.choice && facts.problem != nullptr &&
        !facts.problem->fingerprint.empty() &&
        facts.choice->determinism != format::Determinism::kNondeterministic) {
      SettledEngines::Get().Remember(facts.problem->fingerprint, *facts.choice);
    }
    facts.workspace_bytes = PlanWorkspace(descriptor);
    auto shared = std::make_shared<const PlanFacts>(facts);
    WithShadow(descriptor, [&](Shadow* plan) {
      if (plan == nullptr) return;
      plan->plan = shared;
      plan->owned.insert(plan->owned.end(), owned.begin(), owned.end());
      owned.clear();
    });
    for (cudnnBackendDescriptor_t made : owned) RealDestroy(made);  // no shadow to keep them
  }
  AddChoiceArguments(op, facts);
  op.args.push_back(SignedArgument("workspace_bytes", facts.workspace_bytes));
  session.EndOp(op, static_cast<int32_t>(status));
  return status;
}

// After the program read CUDNN_ATTR_ENGINEHEUR_RESULTS into `configs[0..*count)`: the configs
// learn the graph's problem; under enforce, nondeterministic ones are moved behind the others
// and `*count` is reduced.
void OnHeuristicResults(Session& session, cudnnBackendDescriptor_t heuristics,
                        cudnnBackendDescriptor_t* configs, int64_t* count) {
  const int64_t returned = std::max<int64_t>(*count, 0);
  {
    ShadowTable& table = Shadows();
    std::lock_guard<std::mutex> lock(table.mutex);
    std::shared_ptr<const Problem> problem;
    if (auto found = table.shadows.find(heuristics); found != table.shadows.end()) {
      problem = found->second.problem;
    }
    for (int64_t i = 0; i < returned; ++i) {
      if (auto found = table.shadows.find(configs[i]); found != table.shadows.end()) {
        found->second.problem = problem;
        found->second.source = format::ChoiceSource::kHeuristic;
      }
    }
  }
  if (session.policy().mode != PolicyMode::kEnforce) return;
  std::vector<cudnnBackendDescriptor_t> kept, removed;
  for (int64_t i = 0; i < returned; ++i) {
    std::optional<ConfigChoice> read = ReadConfig(configs[i]);
    if (read && read->choice.determinism == format::Determinism::kNondeterministic) {
      read->choice.source = format::ChoiceSource::kHeuristic;
      session.Decide(Decision(session.PeekOpSequence(),
                              "removed " + ChoiceText(read->choice) +
                                  " from cuDNN's heuristic results",
                              read->choice, std::nullopt, true));
      removed.push_back(configs[i]);
    } else {
      kept.push_back(configs[i]);
    }
  }
  if (removed.empty()) return;
  std::copy(kept.begin(), kept.end(), configs);
  std::copy(removed.begin(), removed.end(), configs + kept.size());
  *count = static_cast<int64_t>(kept.size());
}

// Which tensors of `plan`'s problem the variant pack names, as extents.
void PackExtents(Session& session, const PlanFacts& plan, const std::vector<int64_t>& uids,
                 const std::vector<uint64_t>& pointers, format::OpRecord& op,
                 std::vector<Extent>* inputs, std::vector<Extent>* outputs) {
  if (plan.problem == nullptr) return;
  std::vector<int64_t> named_uids;
  for (const ProblemTensor& tensor : plan.problem->tensors) {
    if (tensor.facts.is_virtual) continue;
    const auto found = std::find(uids.begin(), uids.end(), tensor.facts.uid);
    if (found == uids.end() || static_cast<size_t>(found - uids.begin()) >= pointers.size()) {
      continue;
    }
    const uint64_t address = pointers[static_cast<size_t>(found - uids.begin())];
    named_uids.push_back(tensor.facts.uid);
    op.args.push_back(PointerArgument(session, tensor.role, address));
    const Extent extent{tensor.role, address, ExtentBytes(tensor.facts),
                        CudnnDType(tensor.facts.data_type)};
    if (extent.bytes == 0 || address == 0) continue;
    const bool read = !tensor.output || (tensor.op_index < plan.problem->beta_nonzero.size() &&
                                         plan.problem->beta_nonzero[tensor.op_index]);
    if (read) inputs->push_back(extent);
    if (tensor.output) outputs->push_back(extent);
  }
  op.args.push_back(DimsArgument("uids", named_uids));
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::RealCall;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
  const auto real = NDT_REAL_CUDNN(cudnnBackendCreateDescriptor);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBackendCreateDescriptor", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(type, descriptor); },
      [&](Session&, RealCall<cudnnStatus_t>& call) {
        const cudnnStatus_t status = call.Run([&] { return real(type, descriptor); });
        if (status == CUDNN_STATUS_SUCCESS && descriptor != nullptr) {
          ndt::tracer::Shadow shadow;
          shadow.type = type;
          ndt::tracer::ShadowTable& table = ndt::tracer::Shadows();
          std::lock_guard<std::mutex> lock(table.mutex);
          table.shadows[*descriptor] = std::move(shadow);
        }
        return status;
      });
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  const auto real = NDT_REAL_CUDNN(cudnnBackendDestroyDescriptor);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBackendDestroyDescriptor", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(descriptor); },
      [&](Session&, RealCall<cudnnStatus_t>& call) {
        std::vector<cudnnBackendDescriptor_t> owned;
        {
          ndt::tracer::ShadowTable& table = ndt::tracer::Shadows();
          std::lock_guard<std::mutex> lock(table.mutex);
          if (auto found = table.shadows.find(descriptor); found != table.shadows.end()) {
            owned = std::move(found->second.owned);
            table.shadows.erase(found);
          }
        }
        const cudnnStatus_t status = call.Run([&] { return real(descriptor); });
        for (cudnnBackendDescriptor_t made : owned) ndt::tracer::RealDestroy(made);
        return status;
      });
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* values) {
  const auto real = NDT_REAL_CUDNN(cudnnBackendSetAttribute);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBackendSetAttribute", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(descriptor, name, type, count, values); },
      [&](Session&, RealCall<cudnnStatus_t>& call) {
        const cudnnStatus_t status =
            call.Run([&] { return real(descriptor, name, type, count, values); });
        if (status == CUDNN_STATUS_SUCCESS) {
          ndt::tracer::ShadowTable& table = ndt::tracer::Shadows();
          std::lock_guard<std::mutex> lock(table.mutex);
          ndt::tracer::ShadowSet(table.shadows, descriptor, name, type, count, values);
        }
        return status;
      });
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* values) {
  const auto real = NDT_REAL_CUDNN(cudnnBackendGetAttribute);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBackendGetAttribute", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(descriptor, name, type, requested, count, values); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        const cudnnStatus_t status =
            call.Run([&] { return real(descriptor, name, type, requested, count, values); });
        if (status == CUDNN_STATUS_SUCCESS && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
            type == CUDNN_TYPE_BACKEND_DESCRIPTOR && requested > 0 && count != nullptr &&
            values != nullptr) {
          *count = std::min(*count, requested);
          ndt::tracer::OnHeuristicResults(session, descriptor,
                                          static_cast<cudnnBackendDescriptor_t*>(values), count);
        }
        return status;
      });
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  const auto real = NDT_REAL_CUDNN(cudnnBackendFinalize);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBackendFinalize", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(descriptor); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        const int64_t type = ndt::tracer::WithShadow(
            descriptor, [](ndt::tracer::Shadow* shadow) -> int64_t {
              return shadow != nullptr ? shadow->type : -1;
            });
        if (type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
          return ndt::tracer::FinalizePlan(session, call, descriptor);
        }
        const cudnnStatus_t status = call.Run([&] { return real(descriptor); });
        if (status == CUDNN_STATUS_SUCCESS && type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
          ndt::tracer::WithShadow(descriptor, [&](ndt::tracer::Shadow* graph) {
            if (graph == nullptr) return;
            auto problem = std::make_shared<ndt::tracer::Problem>(
                ndt::tracer::Describe(graph->ops, graph->ops_known));
            problem->graph = descriptor;
            graph->problem = std::move(problem);
          });
        }
        return status;
      });
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  const auto real = NDT_REAL_CUDNN(cudnnBackendExecute);
  return RunLibraryHook<cudnnStatus_t>(
      "cudnnBackendExecute", real != nullptr, CUDNN_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, plan, pack); },
      [&](Session& session, RealCall<cudnnStatus_t>& call) {
        std::shared_ptr<const ndt::tracer::PlanFacts> facts;
        std::vector<int64_t> uids;
        std::vector<uint64_t> pointers;
        {
          ndt::tracer::ShadowTable& table = ndt::tracer::Shadows();
          std::lock_guard<std::mutex> lock(table.mutex);
          if (auto found = table.shadows.find(plan); found != table.shadows.end()) {
            facts = found->second.plan;
          }
          if (auto found = table.shadows.find(pack); found != table.shadows.end()) {
            uids = found->second.uids;
            pointers = found->second.pointers;
          }
        }
        const uint64_t stream = ndt::tracer::CudnnHandleStream(handle);
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kCudnnBackendExecute, "cudnnBackendExecute",
                            session.StreamId(stream, false));
        std::vector<ndt::tracer::Extent> inputs, outputs;
        if (facts != nullptr) {
          ndt::tracer::AddChoiceArguments(op, *facts);
          ndt::tracer::PackExtents(session, *facts, uids, pointers, op, &inputs, &outputs);
          if (op.algorithm && op.algorithm->source == ndt::format::ChoiceSource::kHeuristic &&
              facts->problem != nullptr && !facts->problem->fingerprint.empty() &&
              ndt::tracer::TimedGraphs::Get().Note(facts->problem->fingerprint,
                                                   ndt::tracer::ChoiceText(*op.algorithm))) {
            op.algorithm->source = ndt::format::ChoiceSource::kBenchmark;
          }
        }
        op.inputs = ndt::tracer::DigestExtents(session, stream, inputs);
        const bool capture = ndt::tracer::CaptureWanted(op);
        if (capture) {
          if (facts != nullptr && facts->problem != nullptr &&
              !facts->problem->graph_text.empty()) {
            op.args.push_back(ndt::tracer::TextArgument("graph", facts->problem->graph_text));
          }
          ndt::tracer::CaptureExtents(session, stream, inputs, "in", &op);
        }
        const cudnnStatus_t status = call.Run([&] { return real(handle, plan, pack); });
        if (status == CUDNN_STATUS_SUCCESS) {
          op.outputs = ndt::tracer::DigestExtents(session, stream, outputs);
          if (capture) ndt::tracer::CaptureExtents(session, stream, outputs, "out", &op);
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

}  // extern "C"
