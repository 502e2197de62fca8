// The stand-in cuDNN backend (graph) API: enough of it for a 2-d convolution graph (forward,
// backward data or backward filter) built the way PyTorch and cudnn-frontend build one
// (tests/standin/README.md, "cuDNN backend API").
//
// Descriptors are host objects behind the opaque cudnnBackendDescriptor_t. Setting a
// descriptor-valued attribute copies the (finalized) descriptor it names, as a snapshot, so a
// plan keeps its whole problem (engine config -> engine -> graph -> operation -> tensors) even
// when the program destroys the descriptors it built it from. Getting a descriptor-valued
// attribute fills descriptors the caller created, as the real library does.
//
// Engines (global indices 0..3) all compute out = alpha * result + beta * out in float on the
// host, after synchronising the handle's stream (out and result: y = conv(x, w) forward,
// dx from w and dy backward data, dw from x and dy backward filter); they differ in the order of
// the additions over the reduced terms (channels forward, output channels backward data, rows
// of dy backward filter):
//   0  direct, terms ascending                        deterministic   knob TILE_SIZE 0..3
//   1  split-K over the terms, slices added to the    NONDETERMINISTIC knob SPLIT_K_SLC 2, 4
//      output with float atomics by racing threads
//   2  split-K over the terms, partial sums in the    deterministic   knob SPLIT_K_SLC 2..8
//      workspace, reduced in slice order                              step 2; workspace
//   3  direct, terms descending                       deterministic   knob EDGE 0..1
//      (forward and backward data only: NOT_SUPPORTED at engine finalize, and left out of
//      the heuristics, for a backward-filter graph)
// Knobs other than the split count do not change the result. Heuristics (modes INSTANT, A, B)
// list engine 1 first, as a framework taking the first config would get it; FALLBACK lists
// engine 0 only. Every execution also waits a random 0-2 ms (std::random_device): the timing
// noise that makes autotuning (cudnn.benchmark) pick different configs from run to run.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "standin_cudnn_internal.h"

namespace ndt::standin {
namespace {

constexpr int64_t kEngineCount = 4;

constexpr cudnnBackendDescriptorType_t kConvolutionOperations[] = {
    CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};

struct Descriptor;
using Snapshot = std::shared_ptr<const Descriptor>;

struct KnobSetting {
  int64_t type = 0;
  int64_t value = 0;
};

// Every attribute any supported descriptor type has; `type` says which ones mean something.
struct Descriptor {
  cudnnBackendDescriptorType_t type = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
  bool finalized = false;

  // TENSOR
  std::vector<int64_t> dims, strides;
  cudnnDataType_t data_type = CUDNN_DATA_FLOAT;
  bool has_data_type = false;
  int64_t uid = 0;
  bool has_uid = false;
  int64_t alignment = 0;
  bool is_virtual = false;
  // CONVOLUTION
  int64_t spatial_dims = 0;
  cudnnDataType_t comp_type = CUDNN_DATA_FLOAT;
  bool has_comp_type = false;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  std::vector<int64_t> dilations, filter_strides, pre_paddings, post_paddings;
  // OPERATION_CONVOLUTION_FORWARD, _BACKWARD_DATA (dx in x, dy in y), _BACKWARD_FILTER (dw in
  // w, dy in y)
  Snapshot x, w, y, conv;
  double alpha = 1.0, beta = 0.0;
  // OPERATIONGRAPH (handle also: EXECUTION_PLAN)
  std::vector<Snapshot> ops;
  cudnnHandle_t handle = nullptr;
  // ENGINEHEUR (graph also: ENGINE)
  Snapshot graph;
  cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_INSTANT;
  bool has_heur_mode = false;
  // ENGINE
  int64_t engine_index = -1;
  // ENGINECFG (knobs also: KNOB_CHOICE as knobs[0])
  Snapshot engine;
  std::vector<KnobSetting> knobs;  // after finalize: one per knob of the engine
  bool has_knob_type = false;
  // KNOB_INFO
  int64_t knob_min = 0, knob_max = 0, knob_stride = 1;
  // EXECUTION_PLAN
  Snapshot config;
  int64_t workspace_bytes = 0;
  // VARIANT_PACK
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  void* workspace = nullptr;
};

// Live descriptors, by handle. Descriptors are used outside the lock: using one while another
// thread destroys it is the caller's error, as with the real library.
struct Registry {
  std::mutex mutex;
  std::map<const void*, std::unique_ptr<Descriptor>> live;
};
Registry& Descriptors() {
  static auto* registry = new Registry();  // never destroyed: programs destroy late
  return *registry;
}

Descriptor* Find(const void* handle) {
  Registry& registry = Descriptors();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto found = registry.live.find(handle);
  return found == registry.live.end() ? nullptr : found->second.get();
}

// ---- the engines' knobs and the heuristics -------------------------------------------------

struct KnobRange {
  cudnnBackendKnobType_t type;
  int64_t min, max, stride;
};

std::vector<KnobRange> EngineKnobs(int64_t engine) {
  switch (engine) {
    case 0: return {{CUDNN_KNOB_TYPE_TILE_SIZE, 0, 3, 1}};
    case 1: return {{CUDNN_KNOB_TYPE_SPLIT_K_SLC, 2, 4, 2}};
    case 2: return {{CUDNN_KNOB_TYPE_SPLIT_K_SLC, 2, 8, 2}};
    case 3: return {{CUDNN_KNOB_TYPE_EDGE, 0, 1, 1}};
    default: return {};
  }
}

bool EngineNondeterministic(int64_t engine) { return engine == 1; }

// Whether engine `engine` runs `graph`: every engine but 3, which has no backward-filter
// kernel, runs every graph (as real engines each cover some operations).
bool EngineSupports(int64_t engine, const Descriptor& graph) {
  return engine != 3 ||
         graph.ops.front()->type != CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

struct HeuristicConfig {
  int64_t engine;
  int64_t knob_value;  // of the engine's only knob
};

std::vector<HeuristicConfig> HeuristicOrder(cudnnBackendHeurMode_t mode) {
  if (mode == CUDNN_HEUR_MODE_FALLBACK) return {{0, 0}};
  return {{1, 4}, {1, 2}, {0, 0}, {2, 2}, {3, 0}, {0, 1},
          {0, 2}, {0, 3}, {2, 4}, {2, 8}, {3, 1}};
}

int64_t KnobValue(const Descriptor& config, cudnnBackendKnobType_t type, int64_t fallback) {
  for (const KnobSetting& knob : config.knobs) {
    if (knob.type == type) return knob.value;
  }
  return fallback;
}

// ---- the problem --------------------------------------------------------------------------

// A 2-d convolution from a finalized graph of one operation. Every direction keeps its
// tensors in the operation's x, w and y (dx, dw and dy for the backward ones): forward
// writes y from x and w, backward data dx from w and dy, backward filter dw from x and dy.
struct ConvProblem {
  const Descriptor* op = nullptr;
  cudnnBackendDescriptorType_t direction = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
  int64_t n = 0, c = 0, h = 0, wd = 0, k = 0, r = 0, s = 0, p = 0, q = 0;
};

int64_t OutputSize(int64_t in, int64_t pre, int64_t post, int64_t filter, int64_t dilation,
                   int64_t stride) {
  return (in + pre + post - dilation * (filter - 1) - 1) / stride + 1;
}

ConvProblem Problem(const Descriptor& graph) {
  ConvProblem problem;
  problem.op = graph.ops.front().get();
  const Descriptor& op = *problem.op;
  problem.direction = op.type;
  problem.n = op.x->dims[0];
  problem.c = op.x->dims[1];
  problem.h = op.x->dims[2];
  problem.wd = op.x->dims[3];
  problem.k = op.w->dims[0];
  problem.r = op.w->dims[2];
  problem.s = op.w->dims[3];
  problem.p = op.y->dims[2];
  problem.q = op.y->dims[3];
  return problem;
}

// The tensor the operation writes.
const Descriptor& Output(const ConvProblem& problem) {
  switch (problem.direction) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return *problem.op->x;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return *problem.op->w;
    default: return *problem.op->y;
  }
}

int64_t ElementCount(const ConvProblem& problem) {
  const std::vector<int64_t>& dims = Output(problem).dims;
  return dims[0] * dims[1] * dims[2] * dims[3];
}

// How many terms the engines split: channels (forward), output channels (backward data), or
// rows of dy over the batch (backward filter).
int64_t ReductionLength(const ConvProblem& problem) {
  switch (problem.direction) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return problem.k;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return problem.n * problem.p;
    default: return problem.c;
  }
}

// The coordinates of the output's element number `index` (row-major over its dims).
std::array<int64_t, 4> OutputCoordinates(const ConvProblem& problem, int64_t index) {
  const std::vector<int64_t>& dims = Output(problem).dims;
  std::array<int64_t, 4> at{};
  for (int i = 3; i >= 0; --i) {
    at[static_cast<size_t>(i)] = index % dims[static_cast<size_t>(i)];
    index /= dims[static_cast<size_t>(i)];
  }
  return at;
}

int64_t OutputOffset(const ConvProblem& problem, int64_t index) {
  const std::vector<int64_t>& stride = Output(problem).strides;
  const std::array<int64_t, 4> at = OutputCoordinates(problem, index);
  return at[0] * stride[0] + at[1] * stride[1] + at[2] * stride[2] + at[3] * stride[3];
}

int64_t At(const std::vector<int64_t>& strides, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3];
}

// The sum for the output's element `index` over the reduction terms [begin, end) (ascending,
// or descending when `reverse`), accumulated in float. `x`, `w`, `y` are the operation's
// tensors; the output among them is not read.
float PartialSum(const ConvProblem& problem, const float* x, const float* w, const float* y,
                 int64_t index, int64_t begin, int64_t end, bool reverse) {
  const Descriptor& op = *problem.op;
  const Descriptor& conv = *op.conv;
  const std::vector<int64_t>&xs = op.x->strides, &ws = op.w->strides, &ys = op.y->strides;
  const bool flip = conv.mode == CUDNN_CONVOLUTION;
  const std::array<int64_t, 4> at = OutputCoordinates(problem, index);
  float sum = 0.0f;
  for (int64_t step = begin; step < end; ++step) {
    const int64_t term = reverse ? end - 1 - (step - begin) : step;
    switch (problem.direction) {
      case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: {
        // dx[n, c, row, col] += dy[n, k, p, q] * w[k, c, fr, fs] where row = p*stride - pad +
        // fr*dilation (and so for col).
        const auto [n, c, row, col] = at;
        const int64_t k = term;
        for (int64_t fr = 0; fr < problem.r; ++fr) {
          const int64_t rows = row + conv.pre_paddings[0] - fr * conv.dilations[0];
          if (rows < 0 || rows % conv.filter_strides[0] != 0) continue;
          const int64_t p = rows / conv.filter_strides[0];
          if (p >= problem.p) continue;
          for (int64_t fs = 0; fs < problem.s; ++fs) {
            const int64_t cols = col + conv.pre_paddings[1] - fs * conv.dilations[1];
            if (cols < 0 || cols % conv.filter_strides[1] != 0) continue;
            const int64_t q = cols / conv.filter_strides[1];
            if (q >= problem.q) continue;
            const int64_t wr = flip ? problem.r - 1 - fr : fr;
            const int64_t wc = flip ? problem.s - 1 - fs : fs;
            sum += y[At(ys, n, k, p, q)] * w[At(ws, k, c, wr, wc)];
          }
        }
        break;
      }
      case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: {
        // dw[k, c, wr, wc] += dy[n, k, p, q] * x[n, c, row, col] over the term's row (n, p).
        const auto [k, c, wr, wc] = at;
        const int64_t fr = flip ? problem.r - 1 - wr : wr;
        const int64_t fs = flip ? problem.s - 1 - wc : wc;
        const int64_t n = term / problem.p, p = term % problem.p;
        const int64_t row = p * conv.filter_strides[0] - conv.pre_paddings[0] +
                            fr * conv.dilations[0];
        if (row < 0 || row >= problem.h) break;
        for (int64_t q = 0; q < problem.q; ++q) {
          const int64_t col = q * conv.filter_strides[1] - conv.pre_paddings[1] +
                              fs * conv.dilations[1];
          if (col < 0 || col >= problem.wd) continue;
          sum += y[At(ys, n, k, p, q)] * x[At(xs, n, c, row, col)];
        }
        break;
      }
      default: {
        // y[n, k, p, q] += x[n, c, row, col] * w[k, c, fr, fs] over the term's channel c.
        const auto [n, k, p, q] = at;
        const int64_t c = term;
        for (int64_t fr = 0; fr < problem.r; ++fr) {
          const int64_t row = p * conv.filter_strides[0] - conv.pre_paddings[0] +
                              fr * conv.dilations[0];
          if (row < 0 || row >= problem.h) continue;
          for (int64_t fs = 0; fs < problem.s; ++fs) {
            const int64_t col = q * conv.filter_strides[1] - conv.pre_paddings[1] +
                                fs * conv.dilations[1];
            if (col < 0 || col >= problem.wd) continue;
            const int64_t wr = flip ? problem.r - 1 - fr : fr;
            const int64_t wc = flip ? problem.s - 1 - fs : fs;
            sum += x[At(xs, n, c, row, col)] * w[At(ws, k, c, wr, wc)];
          }
        }
        break;
      }
    }
  }
  return sum;
}

// The operation's tensors in memory; `out` is the one it writes (one of x, w, y).
struct Buffers {
  const float *x, *w, *y;
  float* out;
};

float Blend(const Descriptor& op, float value, const float* out, int64_t offset) {
  const float scaled = static_cast<float>(op.alpha) * value;
  return op.beta == 0.0 ? scaled : scaled + static_cast<float>(op.beta) * out[offset];
}

void RunDirect(const ConvProblem& problem, const Buffers& b, bool reverse) {
  const int64_t terms = ReductionLength(problem);
  for (int64_t i = 0; i < ElementCount(problem); ++i) {
    const int64_t offset = OutputOffset(problem, i);
    b.out[offset] = Blend(*problem.op, PartialSum(problem, b.x, b.w, b.y, i, 0, terms, reverse),
                          b.out, offset);
  }
}

std::pair<int64_t, int64_t> Slice(int64_t terms, int64_t slice, int64_t slices) {
  return {terms * slice / slices, terms * (slice + 1) / slices};
}

void RunSplitWorkspace(const ConvProblem& problem, const Buffers& b, int64_t slices,
                       float* workspace) {
  const int64_t count = ElementCount(problem);
  for (int64_t slice = 0; slice < slices; ++slice) {
    const auto [begin, end] = Slice(ReductionLength(problem), slice, slices);
    for (int64_t i = 0; i < count; ++i) {
      workspace[slice * count + i] = PartialSum(problem, b.x, b.w, b.y, i, begin, end, false);
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int64_t slice = 0; slice < slices; ++slice) sum += workspace[slice * count + i];
    const int64_t offset = OutputOffset(problem, i);
    b.out[offset] = Blend(*problem.op, sum, b.out, offset);
  }
}

void RunAtomic(const ConvProblem& problem, const Buffers& b, int64_t slices) {
  const Descriptor& op = *problem.op;
  const int64_t count = ElementCount(problem);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t offset = OutputOffset(problem, i);
    b.out[offset] = op.beta == 0.0 ? 0.0f : static_cast<float>(op.beta) * b.out[offset];
  }
  RunRacing(static_cast<int>(slices),
            [&](int thread, int threads, const std::function<void()>& yield) {
              const auto [begin, end] = Slice(ReductionLength(problem), thread, threads);
              for (int64_t i = 0; i < count; ++i) {
                const float partial = PartialSum(problem, b.x, b.w, b.y, i, begin, end, false);
                AtomicAddFloat(&b.out[OutputOffset(problem, i)],
                               static_cast<float>(op.alpha) * partial);
                yield();
              }
            });
}

int64_t WorkspaceBytes(const Descriptor& config) {
  const Descriptor& engine = *config.engine;
  if (engine.engine_index != 2) return 0;
  const ConvProblem problem = Problem(*engine.graph);
  return KnobValue(config, CUDNN_KNOB_TYPE_SPLIT_K_SLC, 2) * ElementCount(problem) *
         static_cast<int64_t>(sizeof(float));
}

// ---- attributes ---------------------------------------------------------------------------

template <typename T>
bool ReadOne(cudnnBackendAttributeType_t type, cudnnBackendAttributeType_t expected,
             int64_t count, const void* elements, T* out) {
  if (type != expected || count != 1 || elements == nullptr) return false;
  std::memcpy(out, elements, sizeof(T));
  return true;
}

bool ReadInts(cudnnBackendAttributeType_t type, int64_t count, const void* elements,
              std::vector<int64_t>* out) {
  if (type != CUDNN_TYPE_INT64 || count < 0 || count > 8 || (count > 0 && elements == nullptr)) {
    return false;
  }
  const auto* values = static_cast<const int64_t*>(elements);
  out->assign(values, values + count);
  return true;
}

bool ReadScalar(cudnnBackendAttributeType_t type, int64_t count, const void* elements,
                double* out) {
  if (count != 1 || elements == nullptr) return false;
  if (type == CUDNN_TYPE_DOUBLE) {
    std::memcpy(out, elements, sizeof(double));
    return true;
  }
  if (type == CUDNN_TYPE_FLOAT) {
    float value;
    std::memcpy(&value, elements, sizeof(float));
    *out = value;
    return true;
  }
  return false;
}

// A snapshot of the finalized descriptor named by the single element at `elements`, of type
// `want`; null when it is not one.
Snapshot ReadDescriptor(cudnnBackendAttributeType_t type, int64_t count, const void* elements,
                        cudnnBackendDescriptorType_t want) {
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || count != 1 || elements == nullptr) return nullptr;
  const Descriptor* found = Find(*static_cast<void* const*>(elements));
  if (found == nullptr || found->type != want || !found->finalized) return nullptr;
  return std::make_shared<const Descriptor>(*found);
}

cudnnStatus_t SetAttribute(Descriptor& d, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  bool ok = false;
  switch (name) {
    case CUDNN_ATTR_TENSOR_DIMENSIONS: ok = ReadInts(type, count, elements, &d.dims); break;
    case CUDNN_ATTR_TENSOR_STRIDES: ok = ReadInts(type, count, elements, &d.strides); break;
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
      ok = d.has_data_type = ReadOne(type, CUDNN_TYPE_DATA_TYPE, count, elements, &d.data_type);
      break;
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
      ok = d.has_uid = ReadOne(type, CUDNN_TYPE_INT64, count, elements, &d.uid);
      break;
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
      ok = ReadOne(type, CUDNN_TYPE_INT64, count, elements, &d.alignment);
      break;
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
      ok = ReadOne(type, CUDNN_TYPE_BOOLEAN, count, elements, &d.is_virtual);
      break;
    case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
      ok = ReadOne(type, CUDNN_TYPE_INT64, count, elements, &d.spatial_dims);
      break;
    case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
      ok = d.has_comp_type = ReadOne(type, CUDNN_TYPE_DATA_TYPE, count, elements, &d.comp_type);
      break;
    case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
      ok = ReadOne(type, CUDNN_TYPE_CONVOLUTION_MODE, count, elements, &d.mode);
      break;
    case CUDNN_ATTR_CONVOLUTION_DILATIONS: ok = ReadInts(type, count, elements, &d.dilations); break;
    case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
      ok = ReadInts(type, count, elements, &d.filter_strides);
      break;
    case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
      ok = ReadInts(type, count, elements, &d.pre_paddings);
      break;
    case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
      ok = ReadInts(type, count, elements, &d.post_paddings);
      break;
    // The three convolution operations keep dx, dw and dy in x, w and y.
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X:
      ok = (d.x = ReadDescriptor(type, count, elements, CUDNN_BACKEND_TENSOR_DESCRIPTOR)) != nullptr;
      break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW:
      ok = (d.w = ReadDescriptor(type, count, elements, CUDNN_BACKEND_TENSOR_DESCRIPTOR)) != nullptr;
      break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY:
      ok = (d.y = ReadDescriptor(type, count, elements, CUDNN_BACKEND_TENSOR_DESCRIPTOR)) != nullptr;
      break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC:
      ok = (d.conv = ReadDescriptor(type, count, elements,
                                    CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)) != nullptr;
      break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA:
      ok = ReadScalar(type, count, elements, &d.alpha);
      break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA:
      ok = ReadScalar(type, count, elements, &d.beta);
      break;
    case CUDNN_ATTR_OPERATIONGRAPH_OPS: {
      if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || count < 1 || elements == nullptr) break;
      std::vector<Snapshot> ops;
      for (int64_t i = 0; i < count; ++i) {
        Snapshot op;
        for (cudnnBackendDescriptorType_t kind : kConvolutionOperations) {
          if (op == nullptr) {
            op = ReadDescriptor(type, 1, static_cast<void* const*>(elements) + i, kind);
          }
        }
        if (op == nullptr) return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
        ops.push_back(std::move(op));
      }
      d.ops = std::move(ops);
      ok = true;
      break;
    }
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
    case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
      ok = ReadOne(type, CUDNN_TYPE_HANDLE, count, elements, &d.handle) && d.handle != nullptr;
      break;
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH:
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
      ok = (d.graph = ReadDescriptor(type, count, elements,
                                     CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)) != nullptr;
      break;
    case CUDNN_ATTR_ENGINEHEUR_MODE:
      ok = d.has_heur_mode = ReadOne(type, CUDNN_TYPE_HEUR_MODE, count, elements, &d.heur_mode);
      break;
    case CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET:
    case CUDNN_ATTR_ENGINE_SM_COUNT_TARGET: {
      int32_t ignored;
      ok = ReadOne(type, CUDNN_TYPE_INT32, count, elements, &ignored);
      break;
    }
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      ok = ReadOne(type, CUDNN_TYPE_INT64, count, elements, &d.engine_index);
      break;
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE: {
      cudnnBackendKnobType_t knob;
      ok = d.has_knob_type = ReadOne(type, CUDNN_TYPE_KNOB_TYPE, count, elements, &knob);
      if (ok) {
        d.knobs.resize(1);
        d.knobs[0].type = knob;
      }
      break;
    }
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE: {
      int64_t value;
      ok = ReadOne(type, CUDNN_TYPE_INT64, count, elements, &value);
      if (ok) {
        d.knobs.resize(1);
        d.knobs[0].value = value;
      }
      break;
    }
    case CUDNN_ATTR_ENGINECFG_ENGINE:
      ok = (d.engine = ReadDescriptor(type, count, elements, CUDNN_BACKEND_ENGINE_DESCRIPTOR)) !=
           nullptr;
      break;
    case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: {
      if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || count < 0 || (count > 0 && !elements)) break;
      std::vector<KnobSetting> knobs;
      for (int64_t i = 0; i < count; ++i) {
        Snapshot knob = ReadDescriptor(type, 1, static_cast<void* const*>(elements) + i,
                                       CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        if (knob == nullptr) return CUDNN_STATUS_BAD_PARAM;
        knobs.push_back(knob->knobs[0]);
      }
      d.knobs = std::move(knobs);
      ok = true;
      break;
    }
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
      ok = (d.config = ReadDescriptor(type, count, elements,
                                      CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)) != nullptr;
      break;
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS: {
      if (type != CUDNN_TYPE_INT64 || count < 0 || (count > 0 && !elements)) break;
      const auto* values = static_cast<const int64_t*>(elements);
      d.uids.assign(values, values + count);
      ok = true;
      break;
    }
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS: {
      if (type != CUDNN_TYPE_VOID_PTR || count < 0 || (count > 0 && !elements)) break;
      const auto* values = static_cast<void* const*>(elements);
      d.pointers.assign(values, values + count);
      ok = true;
      break;
    }
    case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
      ok = ReadOne(type, CUDNN_TYPE_VOID_PTR, count, elements, &d.workspace);
      break;
    default:
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return ok ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

bool Is4dFloat(const Snapshot& tensor) {
  return tensor != nullptr && tensor->dims.size() == 4 && tensor->data_type == CUDNN_DATA_FLOAT;
}

cudnnStatus_t FinalizeConvolution(const Descriptor& d) {
  if (!d.x || !d.w || !d.y || !d.conv) return CUDNN_STATUS_BAD_PARAM;
  if (!Is4dFloat(d.x) || !Is4dFloat(d.w) || !Is4dFloat(d.y)) {
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  }
  const Descriptor& conv = *d.conv;
  if (conv.spatial_dims != 2 || conv.comp_type != CUDNN_DATA_FLOAT) {
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (d.x->is_virtual || d.w->is_virtual || d.y->is_virtual) return CUDNN_STATUS_NOT_SUPPORTED;
  const std::vector<int64_t>& x = d.x->dims;
  const std::vector<int64_t>& w = d.w->dims;
  const std::vector<int64_t>& y = d.y->dims;
  if (x[1] != w[1] || y[0] != x[0] || y[1] != w[0]) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  for (int i = 0; i < 2; ++i) {
    if (conv.filter_strides[i] < 1 || conv.dilations[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    if (y[2 + i] != OutputSize(x[2 + i], conv.pre_paddings[i], conv.post_paddings[i], w[2 + i],
                               conv.dilations[i], conv.filter_strides[i])) {
      return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t Finalize(Descriptor& d) {
  if (d.finalized) return CUDNN_STATUS_BAD_PARAM;
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      if (d.dims.empty() || d.dims.size() != d.strides.size() || !d.has_data_type ||
          !d.has_uid || d.alignment <= 0) {
        return CUDNN_STATUS_BAD_PARAM;
      }
      for (size_t i = 0; i < d.dims.size(); ++i) {
        if (d.dims[i] < 1 || d.strides[i] < 1) return CUDNN_STATUS_BAD_PARAM;
      }
      break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: {
      const auto n = static_cast<size_t>(d.spatial_dims);
      if (!d.has_comp_type || n < 1 || d.dilations.size() != n || d.filter_strides.size() != n ||
          d.pre_paddings.size() != n || d.post_paddings.size() != n) {
        return CUDNN_STATUS_BAD_PARAM;
      }
      break;
    }
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      if (cudnnStatus_t status = FinalizeConvolution(d); status != CUDNN_STATUS_SUCCESS) {
        return status;
      }
      break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      if (d.handle == nullptr || d.ops.empty()) return CUDNN_STATUS_BAD_PARAM;
      if (d.ops.size() != 1) return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
      break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      if (d.graph == nullptr || !d.has_heur_mode) return CUDNN_STATUS_BAD_PARAM;
      break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      if (d.graph == nullptr) return CUDNN_STATUS_BAD_PARAM;
      if (d.engine_index < 0 || d.engine_index >= kEngineCount ||
          !EngineSupports(d.engine_index, *d.graph)) {
        return CUDNN_STATUS_NOT_SUPPORTED;
      }
      break;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
      if (!d.has_knob_type) return CUDNN_STATUS_BAD_PARAM;
      break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: {
      if (d.engine == nullptr) return CUDNN_STATUS_BAD_PARAM;
      std::vector<KnobSetting> knobs;
      for (const KnobRange& range : EngineKnobs(d.engine->engine_index)) {
        KnobSetting knob{range.type, range.min};
        for (const KnobSetting& chosen : d.knobs) {
          if (chosen.type == range.type) knob.value = chosen.value;
        }
        if (knob.value < range.min || knob.value > range.max ||
            (knob.value - range.min) % range.stride != 0) {
          return CUDNN_STATUS_NOT_SUPPORTED;
        }
        knobs.push_back(knob);
      }
      for (const KnobSetting& chosen : d.knobs) {
        const auto known = [&](const KnobSetting& knob) { return knob.type == chosen.type; };
        if (std::none_of(knobs.begin(), knobs.end(), known)) return CUDNN_STATUS_NOT_SUPPORTED;
      }
      d.knobs = std::move(knobs);
      d.workspace_bytes = WorkspaceBytes(d);
      break;
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      if (d.handle == nullptr || d.config == nullptr) return CUDNN_STATUS_BAD_PARAM;
      d.workspace_bytes = d.config->workspace_bytes;
      break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      if (d.uids.size() != d.pointers.size()) return CUDNN_STATUS_BAD_PARAM;
      break;
    default:
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
  d.finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

// Copies `count` elements of `size` bytes into the caller's array (at most `requested`).
cudnnStatus_t Give(const void* values, size_t size, int64_t count, int64_t requested,
                   int64_t* element_count, void* elements) {
  if (element_count != nullptr) *element_count = count;
  if (requested < 0) return CUDNN_STATUS_BAD_PARAM;
  if (requested > 0 && elements == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  const int64_t copied = std::min(count, requested);
  if (copied > 0) std::memcpy(elements, values, static_cast<size_t>(copied) * size);
  return CUDNN_STATUS_SUCCESS;
}

template <typename T>
cudnnStatus_t GiveOne(const T& value, cudnnBackendAttributeType_t type,
                      cudnnBackendAttributeType_t expected, int64_t requested,
                      int64_t* element_count, void* elements) {
  if (type != expected) return CUDNN_STATUS_BAD_PARAM;
  return Give(&value, sizeof(T), 1, requested, element_count, elements);
}

// Fills the caller's descriptors `elements[0..]` (each created with type `want`) with
// `values`, finalized: at most `requested` of them.
cudnnStatus_t GiveDescriptors(const std::vector<Descriptor>& values,
                              cudnnBackendDescriptorType_t want,
                              cudnnBackendAttributeType_t type, int64_t requested,
                              int64_t* element_count, void* elements) {
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || requested < 0) return CUDNN_STATUS_BAD_PARAM;
  const auto available = static_cast<int64_t>(values.size());
  if (requested == 0) {
    if (element_count != nullptr) *element_count = available;
    return CUDNN_STATUS_SUCCESS;
  }
  if (elements == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  const int64_t given = std::min(available, requested);
  for (int64_t i = 0; i < given; ++i) {
    Descriptor* target = Find(static_cast<void* const*>(elements)[i]);
    if (target == nullptr || target->type != want) return CUDNN_STATUS_BAD_PARAM;
  }
  for (int64_t i = 0; i < given; ++i) {
    Descriptor* target = Find(static_cast<void* const*>(elements)[i]);
    *target = values[static_cast<size_t>(i)];
    target->type = want;
    target->finalized = true;
  }
  if (element_count != nullptr) *element_count = given;
  return CUDNN_STATUS_SUCCESS;
}

std::vector<Descriptor> HeuristicResults(const Descriptor& heur) {
  std::vector<Descriptor> configs;
  for (const HeuristicConfig& entry : HeuristicOrder(heur.heur_mode)) {
    if (!EngineSupports(entry.engine, *heur.graph)) continue;
    auto engine = std::make_shared<Descriptor>();
    engine->type = CUDNN_BACKEND_ENGINE_DESCRIPTOR;
    engine->finalized = true;
    engine->graph = heur.graph;
    engine->engine_index = entry.engine;
    Descriptor config;
    config.type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
    config.finalized = true;
    config.engine = std::move(engine);
    config.knobs = {{EngineKnobs(entry.engine).front().type, entry.knob_value}};
    config.workspace_bytes = WorkspaceBytes(config);
    configs.push_back(std::move(config));
  }
  return configs;
}

cudnnStatus_t GetAttribute(const Descriptor& d, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t requested,
                           int64_t* element_count, void* elements) {
  const auto ints = [&](const std::vector<int64_t>& values) {
    if (type != CUDNN_TYPE_INT64) return CUDNN_STATUS_BAD_PARAM;
    return Give(values.data(), sizeof(int64_t), static_cast<int64_t>(values.size()), requested,
                element_count, elements);
  };
  switch (name) {
    case CUDNN_ATTR_TENSOR_DIMENSIONS: return ints(d.dims);
    case CUDNN_ATTR_TENSOR_STRIDES: return ints(d.strides);
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
      return GiveOne(d.uid, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
      return GiveOne(d.alignment, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
      return GiveOne(d.data_type, type, CUDNN_TYPE_DATA_TYPE, requested, element_count, elements);
    default:
      break;
  }
  if (!d.finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  switch (name) {
    case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
      return GiveOne(kEngineCount, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_ENGINEHEUR_RESULTS:
      if (d.type != CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
      return GiveDescriptors(HeuristicResults(d), CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, type,
                             requested, element_count, elements);
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      return GiveOne(d.engine_index, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
      if (type != CUDNN_TYPE_NUMERICAL_NOTE) return CUDNN_STATUS_BAD_PARAM;
      std::vector<cudnnBackendNumericalNote_t> notes;
      if (EngineNondeterministic(d.engine_index)) {
        notes.push_back(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
      }
      return Give(notes.data(), sizeof(cudnnBackendNumericalNote_t),
                  static_cast<int64_t>(notes.size()), requested, element_count, elements);
    }
    case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
      if (type != CUDNN_TYPE_BEHAVIOR_NOTE) return CUDNN_STATUS_BAD_PARAM;
      if (element_count != nullptr) *element_count = 0;  // no engine has behaviour notes
      return requested < 0 ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINE_KNOB_INFO: {
      std::vector<Descriptor> infos;
      for (const KnobRange& range : EngineKnobs(d.engine_index)) {
        Descriptor info;
        info.knobs = {{range.type, 0}};
        info.knob_min = range.min;
        info.knob_max = range.max;
        info.knob_stride = range.stride;
        infos.push_back(std::move(info));
      }
      return GiveDescriptors(infos, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, type, requested,
                             element_count, elements);
    }
    case CUDNN_ATTR_KNOB_INFO_TYPE:
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE: {
      const auto knob = static_cast<cudnnBackendKnobType_t>(d.knobs.at(0).type);
      return GiveOne(knob, type, CUDNN_TYPE_KNOB_TYPE, requested, element_count, elements);
    }
    case CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE:
      return GiveOne(d.knobs.at(0).value, type, CUDNN_TYPE_INT64, requested, element_count,
                     elements);
    case CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE:
      return GiveOne(d.knob_min, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE:
      return GiveOne(d.knob_max, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_KNOB_INFO_STRIDE:
      return GiveOne(d.knob_stride, type, CUDNN_TYPE_INT64, requested, element_count, elements);
    case CUDNN_ATTR_ENGINECFG_ENGINE:
      return GiveDescriptors({*d.engine}, CUDNN_BACKEND_ENGINE_DESCRIPTOR, type, requested,
                             element_count, elements);
    case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: {
      std::vector<Descriptor> choices;
      for (const KnobSetting& knob : d.knobs) {
        Descriptor choice;
        choice.knobs = {knob};
        choice.has_knob_type = true;
        choices.push_back(std::move(choice));
      }
      return GiveDescriptors(choices, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, type, requested,
                             element_count, elements);
    }
    case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      return GiveOne(d.workspace_bytes, type, CUDNN_TYPE_INT64, requested, element_count,
                     elements);
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
      return GiveDescriptors({*d.config}, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, type, requested,
                             element_count, elements);
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH:
      return GiveDescriptors({*d.graph}, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, type, requested,
                             element_count, elements);
    default:
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
}

// The timing noise of one execution: a random 0-2 ms.
void WaitTimingNoise() {
  thread_local std::minstd_rand random(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
}

cudnnStatus_t Execute(cudnnHandle_t handle, const Descriptor& plan, const Descriptor& pack) {
  const Descriptor& config = *plan.config;
  const Descriptor& engine = *config.engine;
  const ConvProblem problem = Problem(*engine.graph);
  const auto pointer = [&](const Snapshot& tensor) -> void* {
    for (size_t i = 0; i < pack.uids.size(); ++i) {
      if (pack.uids[i] == tensor->uid) return pack.pointers[i];
    }
    return nullptr;
  };
  auto* x = static_cast<float*>(pointer(problem.op->x));
  auto* w = static_cast<float*>(pointer(problem.op->w));
  auto* y = static_cast<float*>(pointer(problem.op->y));
  if (x == nullptr || w == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  float* out = &Output(problem) == problem.op->x.get()   ? x
               : &Output(problem) == problem.op->w.get() ? w
                                                         : y;
  const Buffers buffers{x, w, y, out};
  if (plan.workspace_bytes > 0 && pack.workspace == nullptr) {
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  }
  if (cudnnStatus_t status = SynchronizeHandle(handle); status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  switch (engine.engine_index) {
    case 0: RunDirect(problem, buffers, false); break;
    case 1: RunAtomic(problem, buffers, KnobValue(config, CUDNN_KNOB_TYPE_SPLIT_K_SLC, 2)); break;
    case 2:
      RunSplitWorkspace(problem, buffers, KnobValue(config, CUDNN_KNOB_TYPE_SPLIT_K_SLC, 2),
                        static_cast<float*>(pack.workspace));
      break;
    case 3: RunDirect(problem, buffers, true); break;
    default: return CUDNN_STATUS_INTERNAL_ERROR;
  }
  WaitTimingNoise();
  return CUDNN_STATUS_SUCCESS;
}

bool Supported(cudnnBackendDescriptorType_t type) {
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      return true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace ndt::standin

using ndt::standin::Descriptor;
using ndt::standin::Descriptors;
using ndt::standin::Find;

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!ndt::standin::Supported(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  auto created = std::make_unique<Descriptor>();
  created->type = type;
  *descriptor = created.get();
  auto& registry = Descriptors();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.live.emplace(created.get(), std::move(created));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  auto& registry = Descriptors();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.live.erase(descriptor) == 1 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor) {
  Descriptor* found = Find(descriptor);
  if (found == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const cudnnBackendDescriptorType_t type = found->type;
  *found = Descriptor();
  found->type = type;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* elements) {
  Descriptor* found = Find(descriptor);
  if (found == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (found->finalized) return CUDNN_STATUS_BAD_PARAM;
  return ndt::standin::SetAttribute(*found, name, type, count, elements);
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* element_count, void* elements) {
  const Descriptor* found = Find(descriptor);
  if (found == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return ndt::standin::GetAttribute(*found, name, type, requested, element_count, elements);
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  Descriptor* found = Find(descriptor);
  if (found == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return ndt::standin::Finalize(*found);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  const Descriptor* found_plan = Find(plan);
  const Descriptor* found_pack = Find(pack);
  if (handle == nullptr || found_plan == nullptr || found_pack == nullptr ||
      found_plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      found_pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!found_plan->finalized || !found_pack->finalized) {
    return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  }
  return ndt::standin::Execute(handle, *found_plan, *found_pack);
}

}  // extern "C"
