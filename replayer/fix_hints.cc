#include "replayer/fix_hints.h"

#include <array>
#include <string_view>

#include "replayer/fix_hints_cudnn_rnn.h"

namespace ndt::replay {
namespace {

constexpr const char* kUseDeterministic =
    "torch.use_deterministic_algorithms(True) makes PyTorch use its deterministic "
    "implementation of this op";
constexpr const char* kNoDeterministic =
    "PyTorch has no deterministic CUDA implementation: with "
    "torch.use_deterministic_algorithms(True) it raises instead; run this op on the CPU or "
    "replace it";

// A kernel-name row: any of `patterns` (substrings of the demangled name) identifies it.
struct KernelHint {
  std::array<std::string_view, 3> patterns;
  const char* framework_op;
  const char* mechanism;
  const char* fix;
};

// Ordered: the first row with a matching pattern wins, so specific rows come first.
constexpr KernelHint kKernelHints[] = {
    {{"indexFuncLargeIndex", "indexFuncSmallIndex", "index_add"},
     "torch.Tensor.index_add_ (also index_select backward, repeat_interleave backward)",
     "gpuAtomicAdd of floats: the order of the additions changes from run to run",
     kUseDeterministic},
    {{"index_put_with_sort", "index_put_kernel", "index_put"},
     "torch.Tensor.index_put_(accumulate=True) / advanced-indexing assignment",
     "duplicate indices are accumulated with atomics or written by racing threads",
     kUseDeterministic},
    {{"scatter_gather_elementwise_kernel", "scatter_add", "scatter_reduce"},
     "torch.Tensor.scatter_add_ / scatter_reduce / gather backward",
     "fastAtomicAdd into the output: the order of the additions changes from run to run",
     kUseDeterministic},
    {{"index_copy", "", ""},
     "torch.Tensor.index_copy_",
     "threads write duplicate indices in racing order",
     kUseDeterministic},
    {{"embedding_bag", "EmbeddingBag", ""},
     "torch.nn.EmbeddingBag backward",
     "gradient rows are accumulated with atomics",
     kNoDeterministic},
    {{"ctc_loss_backward", "ctc_loss_collect", ""},
     "torch.nn.CTCLoss backward",
     "atomicAdd into the gradient",
     kNoDeterministic},
    {{"adaptive_average_gradinput", "adaptive_avg_pool", "adaptiveaveragegradinput"},
     "torch.nn.AdaptiveAvgPool2d/3d backward",
     "overlapping windows are accumulated with atomics",
     kNoDeterministic},
    {{"adaptive_max_pool", "max_pool3d_backward", "fractional_max_pool"},
     "torch.nn.AdaptiveMaxPool2d / MaxPool3d / FractionalMaxPool backward",
     "overlapping windows are accumulated with atomics",
     kNoDeterministic},
    {{"avg_pool3d_backward", "", ""},
     "torch.nn.AvgPool3d backward",
     "overlapping windows are accumulated with atomics",
     kNoDeterministic},
    {{"upsample_", "_backward", ""},  // both must match: see Matches()
     "torch.nn.functional.interpolate backward (linear, bilinear, bicubic, trilinear)",
     "atomicAdd into grad_input",
     kNoDeterministic},
    {{"grid_sampler_2d_backward", "grid_sampler_3d_backward", "grid_sample"},
     "torch.nn.functional.grid_sample backward",
     "atomicAdd into the gradient (safe_add_2d/3d)",
     kNoDeterministic},
    {{"reflection_pad", "", ""},
     "torch.nn.ReflectionPad1d/2d/3d backward",
     "reflected positions are accumulated with atomics",
     kNoDeterministic},
    {{"replication_pad", "", ""},
     "torch.nn.ReplicationPad backward",
     "atomicAdd into grad_input",
     kUseDeterministic},
    {{"max_unpool", "MaxUnpool", ""},
     "torch.nn.MaxUnpool1d/2d/3d",
     "duplicate indices race: the last writer wins",
     kNoDeterministic},
    {{"nll_loss", "", ""},
     "torch.nn.NLLLoss / cross_entropy",
     "the loss and total weight are accumulated with atomics",
     kNoDeterministic},
    {{"histogram", "histc", ""},
     "torch.histc",
     "atomicAdd of floating-point counts",
     kNoDeterministic},
    {{"bincount", "", ""},
     "torch.bincount with weights",
     "atomicAdd of floating-point weights",
     kNoDeterministic},
    {{"put_kernel", "take_put", ""},
     "torch.Tensor.put_",
     "racing writes or atomics for duplicate indices",
     kNoDeterministic},
    {{"DeviceScan", "cumsum", "scan_"},
     "torch.cumsum (floating point)",
     "the device scan combines partial sums in a schedule-dependent order",
     "torch.use_deterministic_algorithms(True) (PyTorch then takes a deterministic path or "
     "raises); or accumulate in float64"},
    {{"flash_bwd", "fmha_cutlassB", "attention_backward"},  // fmha_cutlassB: memory-efficient
     "torch.nn.functional.scaled_dot_product_attention backward (flash or memory-efficient "
     "attention)",
     "the gradient of the keys and values (or of the queries) is accumulated across blocks with "
     "atomics",
     "run the backward with torch.nn.attention.sdpa_kernel(SDPBackend.MATH) (deterministic, "
     "slower); under torch.use_deterministic_algorithms(True) PyTorch takes a deterministic path "
     "where it has one and warns or raises where it has none"},
    {{"kthvalue", "median", ""},
     "torch.kthvalue / torch.median with indices",
     "which index is returned among ties depends on thread timing",
     kNoDeterministic},
};

bool Matches(const KernelHint& row, std::string_view name) {
  if (row.patterns[0] == "upsample_") {
    return name.find("upsample_") != std::string_view::npos &&
           name.find("_backward") != std::string_view::npos;
  }
  for (std::string_view pattern : row.patterns) {
    if (!pattern.empty() && name.find(pattern) != std::string_view::npos) return true;
  }
  return false;
}

FixHint Hint(const char* framework_op, const char* mechanism, const char* fix) {
  return FixHint{framework_op, mechanism, fix};
}

std::optional<FixHint> LibraryHint(const format::OpRecord& op, DivergenceClass klass) {
  using format::OpKind;
  switch (op.kind) {
    case OpKind::kCudnnConvolution:
    case OpKind::kCudnnBackendExecute:
      if (klass == DivergenceClass::kAlgorithmSelection) {
        return Hint("torch.nn.Conv*d / ConvTranspose*d (cuDNN)",
                    "cuDNN chose a different engine in each run (torch.backends.cudnn."
                    "benchmark=True picks engines by timing, which varies)",
                    "ndtrace run --pin TRACE keeps benchmark speed with the engines recorded "
                    "in TRACE; or torch.backends.cudnn.benchmark=False");
      }
      if (op.kind == OpKind::kCudnnConvolution) {
        return Hint("torch.nn.Conv*d / ConvTranspose*d (cuDNN)",
                    "the cuDNN algorithm accumulates with atomics (cuDNN documents it as "
                    "nondeterministic: CUDNN_NON_DETERMINISTIC)",
                    "ndtrace run --deterministic (replaces it by the best deterministic "
                    "algorithm that fits the workspace); or torch.backends.cudnn.deterministic="
                    "True / torch.use_deterministic_algorithms(True)");
      }
      return Hint("torch.nn.Conv*d / ConvTranspose*d (cuDNN)",
                  "the cuDNN engine accumulates with atomics or split reductions "
                  "(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)",
                  "ndtrace run --deterministic (keeps nondeterministic engines out); or "
                  "torch.backends.cudnn.deterministic=True / "
                  "torch.use_deterministic_algorithms(True)");
    case OpKind::kCublasGemm:
    case OpKind::kCublasLtMatmul:
      if (klass == DivergenceClass::kAlgorithmSelection) {
        return Hint("torch.matmul / torch.nn.Linear (cuBLAS)",
                    "cuBLAS(Lt) chose a different algorithm in each run",
                    "ndtrace run --pin TRACE forces the recorded algorithms; or "
                    "CUBLAS_WORKSPACE_CONFIG=:4096:8");
      }
      if (op.kind == OpKind::kCublasLtMatmul) {
        return Hint("torch.matmul / torch.nn.Linear (cuBLASLt)",
                    "the cuBLASLt algorithm splits K and reduces the partial sums out of place "
                    "in a varying order",
                    "ndtrace run --deterministic (keeps out-of-place split-K algorithms out of "
                    "the heuristics' results); or ndtrace run --pin TRACE with a trace whose "
                    "algorithm is deterministic");
      }
      return Hint("torch.matmul / torch.nn.Linear (cuBLAS)",
                  "split-K with atomics or multi-stream workspace reductions combine partial "
                  "sums in a varying order",
                  "CUBLAS_WORKSPACE_CONFIG=:4096:8 (or ndtrace run --deterministic, which also "
                  "keeps a workspace per stream and forbids atomics)");
    case OpKind::kCurandGenerate:
      return Hint("a cuRAND user (torch.randn and friends on CUDA)",
                  "the generator's seed, offset or ordering differs between runs",
                  "seed it (torch.manual_seed / curandSetPseudoRandomGeneratorSeed); "
                  "ndtrace run --pin TRACE forces the seed, offset and ordering recorded in "
                  "TRACE");
    case OpKind::kNcclCollective:
      return Hint("torch.distributed collectives (NCCL)",
                  "NCCL's algorithm, protocol or channel count changes the reduction order",
                  "ndtrace run --deterministic pins NCCL_ALGO, NCCL_PROTO and channels; or set "
                  "them yourself");
    case OpKind::kMemcpy:
      if (klass == DivergenceClass::kPropagated) {
        return Hint("the data the program copies to the GPU (data loading, CPU RNG)",
                    "the host bytes differ before the GPU sees them",
                    "seed data loading (DataLoader generator and worker_init_fn), "
                    "torch.manual_seed, PYTHONHASHSEED");
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

const char* DivergenceClassName(DivergenceClass c) {
  switch (c) {
    case DivergenceClass::kNondeterministicOp: return "nondeterministic_op";
    case DivergenceClass::kRngState: return "rng_state";
    case DivergenceClass::kAlgorithmSelection: return "algorithm_selection";
    case DivergenceClass::kPropagated: return "propagated";
    case DivergenceClass::kUncovered: return "uncovered";
  }
  return "unknown";
}

std::optional<FixHint> FindFixHint(const format::OpRecord& op, DivergenceClass klass) {
  // cuDNN RNN and dropout ops: their own entry (fix_hints_cudnn_rnn.cc).
  if (auto hint = CudnnRnnFixHint(op, klass)) return hint;
  if (klass == DivergenceClass::kRngState && op.kind == format::OpKind::kGraphLaunch) {
    return Hint(
        "random ops replayed in a CUDA graph (torch.cuda.graphs: dropout, torch.rand*, "
        "...)",
        "the replay read a different Philox seed or offset: CUDAGraph.replay() writes "
        "the generator's seed and offset at that moment into the graph's state words",
        "seed with torch.manual_seed before the graph is captured and replayed (each "
        "replay takes the generator's current seed and offset, not those of the "
        "capture) and keep the random ops and replays before this one identical "
        "across runs");
  }
  if (klass == DivergenceClass::kRngState && op.kind != format::OpKind::kCurandGenerate) {
    return Hint("a random op (dropout, torch.rand*, ...)",
                "it consumed a different Philox seed or offset",
                "seed with torch.manual_seed and keep the number of random ops before this "
                "one identical across runs");
  }
  if (auto hint = LibraryHint(op, klass)) return hint;
  if (op.kind == format::OpKind::kKernelLaunch) {
    for (const KernelHint& row : kKernelHints) {
      if (Matches(row, op.name)) return Hint(row.framework_op, row.mechanism, row.fix);
    }
    if (klass == DivergenceClass::kNondeterministicOp) {
      return Hint("(a kernel not in ndtrace's table)",
                  "same inputs, different outputs: typically atomics or a race",
                  "if it belongs to a PyTorch op, torch.use_deterministic_algorithms(True) "
                  "either fixes it or raises an error naming the op");
    }
  }
  return std::nullopt;
}

size_t KernelHintCount() { return std::size(kKernelHints); }

}  // namespace ndt::replay
