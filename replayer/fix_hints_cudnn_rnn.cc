// What the hints say, and where it is documented:
// - cuDNN release notes (7.6.5 to 8.x, "Limitations"): RNN and multi-head attention calls may be
//   nondeterministic because the cuBLAS calls inside them may pick another workspace buffer, and
//   with it another kernel, when cuBLAS is used from more than one stream with the default two
//   buffer sizes; one size in CUBLAS_WORKSPACE_CONFIG (":16:8" or ":4096:2") removes it.
// - PyTorch's nn.LSTM / nn.GRU / nn.RNN documentation (cudnn_rnn_determinism): the same two
//   settings.
// - cuDNN documents nothing about the determinism of its RNN algorithms (cudnnRNNAlgo_t) or of
//   the weight-gradient accumulation of cudnnRNNBackwardWeights_v8 (CUDNN_WGRAD_MODE_ADD adds
//   into the weight-gradient buffer): the hints say so rather than name a cause.
#include "replayer/fix_hints_cudnn_rnn.h"

#include <string>
#include <string_view>
#include <variant>

namespace ndt::replay {
namespace {

constexpr const char* kFrameworkOp = "torch.nn.LSTM / GRU / RNN on CUDA (cuDNN RNN)";
constexpr const char* kDropoutOp =
    "torch.nn.LSTM / GRU / RNN with dropout between layers (cuDNN dropout descriptor)";

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool IsRnnOp(const format::OpRecord& op) {
  return op.kind == format::OpKind::kOther &&
         (StartsWith(op.name, "cudnnRNN") || op.name == "cudnnSetRNNDescriptor_v8" ||
          op.name == "cudnnGetRNNTempSpaceSizes");
}

bool IsDropoutOp(const format::OpRecord& op) {
  return op.kind == format::OpKind::kOther &&
         (op.name == "cudnnSetDropoutDescriptor" || op.name == "cudnnRestoreDropoutDescriptor");
}

}  // namespace

std::optional<FixHint> CudnnRnnFixHint(const format::OpRecord& op, DivergenceClass klass) {
  if (klass == DivergenceClass::kRngState && (IsDropoutOp(op) || IsRnnOp(op))) {
    return FixHint{kDropoutOp,
                   "cuDNN's dropout states were initialised from a different seed "
                   "(cudnnSetDropoutDescriptor), or consumed a different number of times before "
                   "this call; PyTorch draws that seed from its CUDA generator",
                   "seed with torch.manual_seed before the model first runs, and keep the calls "
                   "before this one identical across runs; ndtrace run --pin TRACE gives "
                   "cudnnSetDropoutDescriptor the seed recorded in TRACE"};
  }
  if (!IsRnnOp(op)) return std::nullopt;
  const std::string algorithm = op.algorithm ? op.algorithm->name : std::string("its algorithm");
  if (klass == DivergenceClass::kAlgorithmSelection) {
    return FixHint{kFrameworkOp,
                   "the RNN descriptor (cudnnSetRNNDescriptor_v8) named a different cuDNN RNN "
                   "algorithm in each run",
                   "ndtrace run --pin TRACE forces the algorithm recorded in TRACE; ndtrace run "
                   "--deterministic runs CUDNN_RNN_ALGO_STANDARD"};
  }
  std::string mechanism =
      op.name + " ran " + algorithm + ". cuDNN's release notes document RNN " +
      "calls as nondeterministic when the cuBLAS calls inside them may use " +
      "more than one workspace buffer size (cuBLAS's default, when it is used " +
      "from several streams)";
  if (op.algorithm && StartsWith(op.algorithm->name, "CUDNN_RNN_ALGO_PERSIST")) {
    mechanism += "; cuDNN documents nothing of the determinism of its persistent RNN algorithms";
  }
  if (op.name == "cudnnRNNBackwardWeights_v8") {
    mechanism +=
        "; this call adds the weight gradients into the gradient buffer "
        "(CUDNN_WGRAD_MODE_ADD), whose accumulation order cuDNN does not document";
  }
  return FixHint{kFrameworkOp, mechanism,
                 "start the program with CUBLAS_WORKSPACE_CONFIG=:4096:8 (PyTorch's RNN docs: "
                 ":16:8 or :4096:2); ndtrace run --deterministic sets it and runs "
                 "CUDNN_RNN_ALGO_STANDARD instead of a persistent algorithm"};
}

}  // namespace ndt::replay
