// cuDNN data types by the names the tracer records them with ("f32", "bf16", ...): what the
// two cuDNN replayers (op_replay_cudnn_legacy.cc, op_replay_cudnn_backend.cc) share. Internal
// to replayer/; needs the cuDNN headers.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ndt::replay::internal {

inline std::optional<cudnnDataType_t> DataType(const std::string& text) {
  static const std::map<std::string, cudnnDataType_t> kTypes = {
      {"f32", CUDNN_DATA_FLOAT},       {"f64", CUDNN_DATA_DOUBLE},     {"f16", CUDNN_DATA_HALF},
      {"bf16", CUDNN_DATA_BFLOAT16},   {"i8", CUDNN_DATA_INT8},        {"i32", CUDNN_DATA_INT32},
      {"i64", CUDNN_DATA_INT64},       {"u8", CUDNN_DATA_UINT8},       {"bool", CUDNN_DATA_BOOLEAN},
      {"f8e4m3", CUDNN_DATA_FP8_E4M3}, {"f8e5m2", CUDNN_DATA_FP8_E5M2}};
  const auto found = kTypes.find(text);
  if (found == kTypes.end()) return std::nullopt;
  return found->second;
}

inline uint64_t ElementBytes(cudnnDataType_t dtype) {
  switch (dtype) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
      return 8;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
      return 4;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
      return 2;
    default:
      return 1;
  }
}

}  // namespace ndt::replay::internal
