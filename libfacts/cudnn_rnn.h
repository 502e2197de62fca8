// cuDNN's RNN API (cudnn_adv.h, cuDNN 9): the names of its enumerations and what cuDNN
// documents about the determinism of its RNN calls. Needs <cudnn.h>.
//
// What is documented (and nothing more is claimed here):
// - cuDNN's release notes (7.6.5 to 8.x, "Limitations") say RNN and multi-head attention calls
//   may be nondeterministic because cuBLAS, which they call, picks its workspace buffer (and with
//   it the kernel) at run time when it is used from more than one stream with the default two
//   buffer sizes; one buffer size in CUBLAS_WORKSPACE_CONFIG (":16:8" or ":4096:2") removes it.
//   PyTorch's nn.LSTM / nn.GRU / nn.RNN documentation gives the same two settings.
// - cuDNN documents no RNN algorithm (cudnnRNNAlgo_t) as deterministic or nondeterministic.
//   ndtrace's policy therefore treats CUDNN_RNN_ALGO_STANDARD, whose only documented cause of
//   nondeterminism has the documented fix above, as its deterministic choice, and the persistent
//   algorithms as of unknown determinism (tracer/README.md, "cuDNN RNN").
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>

namespace ndt::libfacts {

// "CUDNN_RNN_ALGO_STANDARD", ...; "CUDNN_RNN_ALGO_<n>" for one not named here.
inline std::string RnnAlgoName(int64_t algo) {
  static constexpr const char* kNames[] = {"STANDARD", "PERSIST_STATIC", "PERSIST_DYNAMIC",
                                           "PERSIST_STATIC_SMALL_H"};
  if (algo < 0 || algo >= static_cast<int64_t>(std::size(kNames))) {
    return "CUDNN_RNN_ALGO_" + std::to_string(algo);
  }
  return std::string("CUDNN_RNN_ALGO_") + kNames[algo];
}

// The algorithm ndtrace's deterministic policy runs RNN calls with (see above).
inline constexpr cudnnRNNAlgo_t kRnnDeterministicAlgo = CUDNN_RNN_ALGO_STANDARD;

// "rnn_relu", "rnn_tanh", "lstm", "gru" (cudnnRNNMode_t).
inline std::string RnnModeName(int64_t mode) {
  static constexpr const char* kNames[] = {"rnn_relu", "rnn_tanh", "lstm", "gru"};
  if (mode < 0 || mode >= static_cast<int64_t>(std::size(kNames))) {
    return "mode" + std::to_string(mode);
  }
  return kNames[mode];
}

// The gates (weight matrices per layer and input) of a cell mode: 1, 1, 4, 3.
inline int RnnGateCount(int64_t mode) {
  return mode == CUDNN_LSTM ? 4 : mode == CUDNN_GRU ? 3 : 1;
}

inline std::string RnnDirectionName(int64_t direction) {
  return direction == CUDNN_BIDIRECTIONAL ? "bidirectional" : "unidirectional";
}

// "no_bias", "single_inp_bias", "double_bias", "single_rec_bias" (cudnnRNNBiasMode_t).
inline std::string RnnBiasName(int64_t bias) {
  static constexpr const char* kNames[] = {"no_bias", "single_inp_bias", "double_bias",
                                           "single_rec_bias"};
  if (bias < 0 || bias >= static_cast<int64_t>(std::size(kNames))) {
    return "bias" + std::to_string(bias);
  }
  return kNames[bias];
}

// "seq_major_unpacked", "seq_major_packed", "batch_major_unpacked" (cudnnRNNDataLayout_t).
inline std::string RnnLayoutName(int64_t layout) {
  static constexpr const char* kNames[] = {"seq_major_unpacked", "seq_major_packed",
                                           "batch_major_unpacked"};
  if (layout < 0 || layout >= static_cast<int64_t>(std::size(kNames))) {
    return "layout" + std::to_string(layout);
  }
  return kNames[layout];
}

// Whether a CUBLAS_WORKSPACE_CONFIG value names exactly one buffer size (":4096:8", ":16:8"),
// what cuDNN's release notes ask of RNN calls; null (unset) does not.
inline bool CublasWorkspaceHasOneSize(const char* config) {
  if (config == nullptr) return false;
  int sizes = 0;
  const char* at = config;
  while (*at == ':') {
    char* end = nullptr;
    std::strtol(at + 1, &end, 10);
    if (end == at + 1 || *end != ':') return false;
    at = end + 1;
    std::strtol(at, &end, 10);
    if (end == at) return false;
    at = end;
    ++sizes;
  }
  return *at == '\0' && sizes == 1;
}

}  // namespace ndt::libfacts
