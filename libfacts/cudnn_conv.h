// cuDNN's legacy convolution algorithms: their names and which ones cuDNN documents as
// nondeterministic (research/cuda-interposition.md §3). Needs <cudnn.h>.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <iterator>
#include <string>

namespace ndt::libfacts {

enum class ConvDirection { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1", ...; the prefix and the number for one not named here.
inline std::string ConvAlgoName(ConvDirection direction, int64_t algo) {
  static constexpr const char* kForward[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static constexpr const char* kData[] = {"0",          "1",        "FFT",
                                          "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr const char* kFilter[] = {
      "0", "1", "FFT", "3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const auto pick = [algo](const auto& names, const char* prefix) {
    if (algo < 0 || algo >= static_cast<int64_t>(std::size(names))) {
      return std::string(prefix) + std::to_string(algo);
    }
    return std::string(prefix) + names[algo];
  };
  switch (direction) {
    case ConvDirection::kForward:
      return pick(kForward, "CUDNN_CONVOLUTION_FWD_ALGO_");
    case ConvDirection::kBackwardData:
      return pick(kData, "CUDNN_CONVOLUTION_BWD_DATA_ALGO_");
    case ConvDirection::kBackwardFilter:
      return pick(kFilter, "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_");
  }
  return std::to_string(algo);
}

// As cuDNN documents it: BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0 / _3 are nondeterministic.
inline bool ConvAlgoNondeterministic(ConvDirection direction, int64_t algo) {
  return (direction == ConvDirection::kBackwardData && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
         (direction == ConvDirection::kBackwardFilter &&
          (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
}

}  // namespace ndt::libfacts
