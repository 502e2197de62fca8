// cuDNN data types by the names the tracer records them with ("f32", "bf16", ...; sizes from
// formats/records.h): what the two cuDNN replayers (op_replay_cudnn_legacy.cc,
// op_replay_cudnn_backend.cc) share. Internal to replayer/; needs the cuDNN headers.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "formats/records.h"

namespace ndt::replay::internal {

// The cuDNN data types replay knows, by the DType the tracer records each as.
inline constexpr std::pair<format::DType, cudnnDataType_t> kCudnnTypes[] = {
    {format::DType::kF32, CUDNN_DATA_FLOAT},       {format::DType::kF64, CUDNN_DATA_DOUBLE},
    {format::DType::kF16, CUDNN_DATA_HALF},        {format::DType::kBF16, CUDNN_DATA_BFLOAT16},
    {format::DType::kI8, CUDNN_DATA_INT8},         {format::DType::kI32, CUDNN_DATA_INT32},
    {format::DType::kI64, CUDNN_DATA_INT64},       {format::DType::kU8, CUDNN_DATA_UINT8},
    {format::DType::kBool, CUDNN_DATA_BOOLEAN},    {format::DType::kF8E4M3, CUDNN_DATA_FP8_E4M3},
    {format::DType::kF8E5M2, CUDNN_DATA_FP8_E5M2}};

// The cudnnDataType_t a type name of the tracer's stands for ("f32", ...).
inline std::optional<cudnnDataType_t> DataType(const std::string& text) {
  const std::optional<format::DType> dtype = format::ParseDType(text);
  for (const auto& [known, type] : kCudnnTypes) {
    if (dtype == known) return type;
  }
  return std::nullopt;
}

inline uint64_t ElementBytes(cudnnDataType_t type) {
  for (const auto& [known, cudnn] : kCudnnTypes) {
    if (cudnn == type) return format::DTypeBytes(known);
  }
  return 0;
}

}  // namespace ndt::replay::internal
