#include "tracer/cudnn_types.h"

#include <cudnn.h>

#include "tracer/library_support.h"

namespace ndt::tracer {

format::DType CudnnDType(int64_t type) {
  switch (type) {
    case CUDNN_DATA_FLOAT:
      return format::DType::kF32;
    case CUDNN_DATA_DOUBLE:
      return format::DType::kF64;
    case CUDNN_DATA_HALF:
      return format::DType::kF16;
    case CUDNN_DATA_BFLOAT16:
      return format::DType::kBF16;
    case CUDNN_DATA_INT8:
      return format::DType::kI8;
    case CUDNN_DATA_INT32:
      return format::DType::kI32;
    case CUDNN_DATA_INT64:
      return format::DType::kI64;
    case CUDNN_DATA_UINT8:
      return format::DType::kU8;
    case CUDNN_DATA_BOOLEAN:
      return format::DType::kBool;
    case CUDNN_DATA_FP8_E4M3:
      return format::DType::kF8E4M3;
    case CUDNN_DATA_FP8_E5M2:
      return format::DType::kF8E5M2;
    default:
      return format::DType::kUnknown;
  }
}

std::string CudnnDTypeText(int64_t type) {
  const format::DType known = CudnnDType(type);
  return known == format::DType::kUnknown ? "cudnn_dtype_" + std::to_string(type)
                                          : format::DTypeName(known);
}

uint64_t CudnnHandleStream(cudnnContext* handle) {
  const auto get = NDT_REAL_LIBRARY(kCudnnSoname, cudnnGetStream);
  cudaStream_t stream = nullptr;
  if (handle == nullptr || get == nullptr || get(handle, &stream) != CUDNN_STATUS_SUCCESS) {
    return 0;
  }
  return reinterpret_cast<uint64_t>(stream);
}

uint64_t CudnnTensorBytes(int64_t type, const int* dims, const int* strides, int count) {
  uint64_t last = 0;
  for (int i = 0; i < count; ++i) {
    if (dims[i] <= 0 || strides[i] < 0) return 0;
    last += static_cast<uint64_t>(dims[i] - 1) * static_cast<uint64_t>(strides[i]);
  }
  return (last + 1) * format::DTypeBytes(CudnnDType(type));
}

}  // namespace ndt::tracer
