// conv_backend [--benchmark] [--engine N] [--direction fwd|bwd_data|bwd_filter] [iterations]: a
// 2-d convolution (forward by default) through the cuDNN backend
// (graph) API, built the way PyTorch's Conv_v8 and cudnn-frontend build it: tensor,
// convolution and operation descriptors, an operation graph, engine heuristics, an execution
// plan and a variant pack. --direction bwd_data computes dx from w and dy, bwd_filter dw from x
// and dy (the tensors keep the uids of x, w and y).
//
// Default: the first heuristic config whose plan finalizes is executed (PyTorch with
// torch.backends.cudnn.benchmark=False). --benchmark: every config whose engine is not noted
// CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC is timed once with CUDA events and the fastest is
// executed (benchmark=True together with deterministic=True: the choice still depends on
// timing). --engine N: a config of engine N with its default knobs, built by hand
// (CUDNN_BACKEND_ENGINE_DESCRIPTOR with a global index, as frameworks' fallback lists do), is
// tried before the heuristics' configs. Prints the chosen engine ("engine <global index> knobs <type>=<value>...") and the
// checksum of the output (y, dx or dw), after `iterations` (default 1) executions.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program_checksum.h"

namespace {

#define CHECK_CUDA(call)                                                               \
  do {                                                                                 \
    const cudaError_t check_status = (call);                                           \
    if (check_status != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(check_status));       \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

#define CHECK_CUDNN(call)                                                              \
  do {                                                                                 \
    const cudnnStatus_t check_status = (call);                                         \
    if (check_status != CUDNN_STATUS_SUCCESS) {                                        \
      std::fprintf(stderr, "%s: cuDNN status %d\n", #call, static_cast<int>(check_status)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// The problem: NCHW float, 3x3 filter, padding 1, stride 1.
constexpr int64_t kN = 2, kC = 16, kH = 12, kW = 12, kK = 8, kR = 3, kS = 3;
constexpr int64_t kP = kH, kQ = kW;
constexpr int64_t kXUid = 1, kWUid = 2, kYUid = 3;

cudnnBackendDescriptor_t Create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t descriptor = nullptr;
  CHECK_CUDNN(cudnnBackendCreateDescriptor(type, &descriptor));
  return descriptor;
}

cudnnBackendDescriptor_t Tensor(int64_t uid, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  cudnnBackendDescriptor_t tensor = Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  const int64_t alignment = 16;
  CHECK_CUDNN(cudnnBackendSetAttribute(tensor, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE,
                                       1, &dtype));
  CHECK_CUDNN(cudnnBackendSetAttribute(tensor, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
                                       static_cast<int64_t>(dims.size()), dims.data()));
  CHECK_CUDNN(cudnnBackendSetAttribute(tensor, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
                                       static_cast<int64_t>(strides.size()), strides.data()));
  CHECK_CUDNN(cudnnBackendSetAttribute(tensor, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1,
                                       &uid));
  CHECK_CUDNN(cudnnBackendSetAttribute(tensor, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64,
                                       1, &alignment));
  CHECK_CUDNN(cudnnBackendFinalize(tensor));
  return tensor;
}

// The operation descriptor of a direction and its attributes, in the order x, w, y (dx, dw, dy).
struct Direction {
  const char* name;
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

constexpr Direction kDirections[] = {
    {"fwd", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {"bwd_data", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {"bwd_filter", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

cudnnBackendDescriptor_t ConvolutionGraph(cudnnHandle_t handle, const Direction& direction) {
  cudnnBackendDescriptor_t x = Tensor(kXUid, {kN, kC, kH, kW});
  cudnnBackendDescriptor_t w = Tensor(kWUid, {kK, kC, kR, kS});
  cudnnBackendDescriptor_t y = Tensor(kYUid, {kN, kK, kP, kQ});

  cudnnBackendDescriptor_t conv = Create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2;
  const int64_t pads[] = {1, 1}, strides[] = {1, 1}, dilations[] = {1, 1};
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
                                       CUDNN_TYPE_INT64, 1, &spatial));
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                                       CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                       CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                                       CUDNN_TYPE_INT64, spatial, pads));
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
                                       CUDNN_TYPE_INT64, spatial, pads));
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                                       CUDNN_TYPE_INT64, spatial, strides));
  CHECK_CUDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64,
                                       spatial, dilations));
  CHECK_CUDNN(cudnnBackendFinalize(conv));

  cudnnBackendDescriptor_t op = Create(direction.type);
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_CUDNN(cudnnBackendSetAttribute(op, direction.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  CHECK_CUDNN(cudnnBackendSetAttribute(op, direction.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
  CHECK_CUDNN(cudnnBackendSetAttribute(op, direction.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CHECK_CUDNN(
      cudnnBackendSetAttribute(op, direction.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
  CHECK_CUDNN(cudnnBackendSetAttribute(op, direction.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
  CHECK_CUDNN(cudnnBackendSetAttribute(op, direction.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  CHECK_CUDNN(cudnnBackendFinalize(op));

  cudnnBackendDescriptor_t graph = Create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CHECK_CUDNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
  CHECK_CUDNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
                                       1, &handle));
  CHECK_CUDNN(cudnnBackendFinalize(graph));
  for (cudnnBackendDescriptor_t done : {x, w, y, conv, op}) {
    CHECK_CUDNN(cudnnBackendDestroyDescriptor(done));
  }
  return graph;
}

// The engine configs the heuristics propose for `graph`, best first.
std::vector<cudnnBackendDescriptor_t> HeuristicConfigs(cudnnBackendDescriptor_t graph) {
  cudnnBackendDescriptor_t heur = Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
  CHECK_CUDNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  CHECK_CUDNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                       &mode));
  CHECK_CUDNN(cudnnBackendFinalize(heur));
  int64_t available = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr));
  std::vector<cudnnBackendDescriptor_t> configs;
  for (int64_t i = 0; i < available; ++i) configs.push_back(Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t returned = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned,
                                       configs.data()));
  for (size_t i = static_cast<size_t>(returned); i < configs.size(); ++i) {
    CHECK_CUDNN(cudnnBackendDestroyDescriptor(configs[i]));
  }
  configs.resize(static_cast<size_t>(returned));
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(heur));
  return configs;
}

// What a config runs: its engine's global index, numerical notes and knob choices, as text.
struct ConfigFacts {
  int64_t engine = -1;
  bool nondeterministic = false;
  std::string knobs;
};

ConfigFacts Facts(cudnnBackendDescriptor_t config) {
  ConfigFacts facts;
  cudnnBackendDescriptor_t engine = Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t count = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &engine));
  CHECK_CUDNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                       &count, &facts.engine));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  CHECK_CUDNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                       &count, notes));
  for (int64_t i = 0; i < count && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) facts.nondeterministic = true;
  }
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(engine));

  int64_t knob_count = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &knob_count, nullptr));
  std::vector<cudnnBackendDescriptor_t> knobs;
  for (int64_t i = 0; i < knob_count; ++i) knobs.push_back(Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
  if (knob_count > 0) {
    CHECK_CUDNN(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, knob_count, &count,
                                         knobs.data()));
  }
  for (cudnnBackendDescriptor_t knob : knobs) {
    cudnnBackendKnobType_t type;
    int64_t value = 0;
    CHECK_CUDNN(cudnnBackendGetAttribute(knob, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                         CUDNN_TYPE_KNOB_TYPE, 1, &count, &type));
    CHECK_CUDNN(cudnnBackendGetAttribute(knob, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                         CUDNN_TYPE_INT64, 1, &count, &value));
    facts.knobs += " " + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value);
    CHECK_CUDNN(cudnnBackendDestroyDescriptor(knob));
  }
  return facts;
}

// A config of engine `index` of `graph` with its default knobs.
cudnnBackendDescriptor_t EngineConfig(cudnnBackendDescriptor_t graph, int64_t index) {
  cudnnBackendDescriptor_t engine = Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  CHECK_CUDNN(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  CHECK_CUDNN(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64,
                                       1, &index));
  CHECK_CUDNN(cudnnBackendFinalize(engine));
  cudnnBackendDescriptor_t config = Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  CHECK_CUDNN(cudnnBackendSetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine));
  CHECK_CUDNN(cudnnBackendFinalize(config));
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(engine));
  return config;
}

// A finalized plan for `config`, or null when the library refuses it.
cudnnBackendDescriptor_t Plan(cudnnHandle_t handle, cudnnBackendDescriptor_t config) {
  cudnnBackendDescriptor_t plan = Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  CHECK_CUDNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                       1, &handle));
  CHECK_CUDNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config));
  if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) {
    CHECK_CUDNN(cudnnBackendDestroyDescriptor(plan));
    return nullptr;
  }
  return plan;
}

// A plan with its workspace and variant pack, ready to execute.
struct Runnable {
  cudnnBackendDescriptor_t plan = nullptr;
  cudnnBackendDescriptor_t pack = nullptr;
  void* workspace = nullptr;
};

Runnable Prepare(cudnnBackendDescriptor_t plan, void* x, void* w, void* y) {
  Runnable runnable;
  runnable.plan = plan;
  int64_t workspace_bytes = 0, count = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &count, &workspace_bytes));
  if (workspace_bytes > 0) {
    CHECK_CUDA(cudaMalloc(&runnable.workspace, static_cast<size_t>(workspace_bytes)));
  }
  runnable.pack = Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[] = {kXUid, kWUid, kYUid};
  void* pointers[] = {x, w, y};
  CHECK_CUDNN(cudnnBackendSetAttribute(runnable.pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                       CUDNN_TYPE_INT64, 3, uids));
  CHECK_CUDNN(cudnnBackendSetAttribute(runnable.pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, 3, pointers));
  CHECK_CUDNN(cudnnBackendSetAttribute(runnable.pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                       CUDNN_TYPE_VOID_PTR, 1, &runnable.workspace));
  CHECK_CUDNN(cudnnBackendFinalize(runnable.pack));
  return runnable;
}

void Release(Runnable& runnable) {
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(runnable.pack));
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(runnable.plan));
  if (runnable.workspace != nullptr) CHECK_CUDA(cudaFree(runnable.workspace));
  runnable = Runnable();
}

// Inputs of mixed magnitudes, so that the order of additions shows in the result's bits.
std::vector<float> Values(size_t count, uint32_t seed) {
  std::vector<float> values(count);
  uint32_t state = seed;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    value = std::ldexp(unit, static_cast<int>(state % 13) - 6);
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  bool benchmark = false;
  long iterations = 1;
  long engine = -1;
  const Direction* direction = &kDirections[0];
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--benchmark") == 0) {
      benchmark = true;
    } else if (std::strcmp(argv[i], "--direction") == 0 && i + 1 < argc) {
      ++i;
      direction = nullptr;
      for (const Direction& known : kDirections) {
        if (std::strcmp(argv[i], known.name) == 0) direction = &known;
      }
      if (direction == nullptr) {
        std::fprintf(stderr, "conv_backend: --direction is fwd, bwd_data or bwd_filter\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--engine") == 0 && i + 1 < argc) {
      engine = std::strtol(argv[++i], nullptr, 10);
    } else {
      char* end = nullptr;
      iterations = std::strtol(argv[i], &end, 10);
      if (end == argv[i] || *end != '\0' || iterations < 1) {
        std::fprintf(stderr,
                     "usage: conv_backend [--benchmark] [--engine N] "
                     "[--direction fwd|bwd_data|bwd_filter] [iterations >= 1]\n");
        return 2;
      }
    }
  }

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudnnHandle_t handle;
  CHECK_CUDNN(cudnnCreate(&handle));
  CHECK_CUDNN(cudnnSetStream(handle, stream));

  std::vector<float> host_x = Values(kN * kC * kH * kW, 1);
  std::vector<float> host_w = Values(kK * kC * kR * kS, 2);
  std::vector<float> host_y = Values(kN * kK * kP * kQ, 3);
  void *x, *w, *y;
  CHECK_CUDA(cudaMalloc(&x, host_x.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&w, host_w.size() * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&y, host_y.size() * sizeof(float)));
  CHECK_CUDA(cudaMemcpyAsync(x, host_x.data(), host_x.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemcpyAsync(w, host_w.data(), host_w.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  // What a direction writes: y forward; dx (in x) or dw (in w) backward, which read dy (in y).
  std::vector<float>* host_out = &host_y;
  void* out = y;
  if (direction != &kDirections[0]) {
    CHECK_CUDA(cudaMemcpyAsync(y, host_y.data(), host_y.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream));
    const bool data = direction == &kDirections[1];
    host_out = data ? &host_x : &host_w;
    out = data ? x : w;
  }

  cudnnBackendDescriptor_t graph = ConvolutionGraph(handle, *direction);
  std::vector<cudnnBackendDescriptor_t> configs = HeuristicConfigs(graph);
  if (engine >= 0) configs.insert(configs.begin(), EngineConfig(graph, engine));

  Runnable chosen;
  if (!benchmark) {
    for (cudnnBackendDescriptor_t config : configs) {
      if (cudnnBackendDescriptor_t plan = Plan(handle, config)) {
        chosen = Prepare(plan, x, w, y);
        break;
      }
    }
  } else {
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    float best_ms = 0;
    for (cudnnBackendDescriptor_t config : configs) {
      if (Facts(config).nondeterministic) continue;
      cudnnBackendDescriptor_t plan = Plan(handle, config);
      if (plan == nullptr) continue;
      Runnable trial = Prepare(plan, x, w, y);
      CHECK_CUDA(cudaEventRecord(start, stream));
      CHECK_CUDNN(cudnnBackendExecute(handle, trial.plan, trial.pack));
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      if (chosen.plan == nullptr || ms < best_ms) {
        if (chosen.plan != nullptr) Release(chosen);
        chosen = trial;
        best_ms = ms;
      } else {
        Release(trial);
      }
    }
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
  }
  if (chosen.plan == nullptr) {
    std::fprintf(stderr, "conv_backend: no engine config could be finalized\n");
    return 1;
  }

  cudnnBackendDescriptor_t plan_config = Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t count = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(chosen.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &plan_config));
  const ConfigFacts facts = Facts(plan_config);
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(plan_config));
  std::printf("engine %lld knobs%s%s\n", static_cast<long long>(facts.engine),
              facts.knobs.c_str(), facts.nondeterministic ? " (nondeterministic)" : "");

  for (long i = 0; i < iterations; ++i) {
    CHECK_CUDNN(cudnnBackendExecute(handle, chosen.plan, chosen.pack));
  }
  CHECK_CUDA(cudaMemcpyAsync(host_out->data(), out, host_out->size() * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  ndt::programs::PrintChecksum(host_out->data(), host_out->size() * sizeof(float));

  Release(chosen);
  for (cudnnBackendDescriptor_t config : configs) CHECK_CUDNN(cudnnBackendDestroyDescriptor(config));
  CHECK_CUDNN(cudnnBackendDestroyDescriptor(graph));
  CHECK_CUDA(cudaFree(x));
  CHECK_CUDA(cudaFree(w));
  CHECK_CUDA(cudaFree(y));
  CHECK_CUDNN(cudnnDestroy(handle));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
