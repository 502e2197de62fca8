// What every cuDNN hook (legacy, backend, RNN, tensor operations) shares: what cuDNN's data
// types are (one table), a handle's stream, a strided tensor's extent.
#pragma once

#include <cstdint>
#include <string>

#include "formats/records.h"

struct cudnnContext;  // cudnnHandle_t is a cudnnContext*

namespace ndt::tracer {

// The stream of `handle` (0: the legacy default stream, or the handle is unknown), through the
// real cudnnGetStream.
uint64_t CudnnHandleStream(cudnnContext* handle);

// The bytes from a tensor's first element to its last: `count` dims and strides (elements) of
// elements of cuDNN data type `type`; 0 when a dim is not positive, a stride is negative or the
// type is unknown.
uint64_t CudnnTensorBytes(int64_t type, const int* dims, const int* strides, int count);

// The element type of a cudnnDataType_t value (the backend API passes it as int64_t);
// kUnknown for types ndtrace does not name (packed, complex, ...).
format::DType CudnnDType(int64_t type);

// Its name as records carry it ("float32", ...), or "cudnn_dtype_<N>" when unknown.
std::string CudnnDTypeText(int64_t type);

}  // namespace ndt::tracer
