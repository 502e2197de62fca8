// What cuDNN's data types are, for every cuDNN hook (legacy, backend, RNN): one table.
#pragma once

#include <cstdint>
#include <string>

#include "formats/records.h"

namespace ndt::tracer {

// The element type of a cudnnDataType_t value (the backend API passes it as int64_t);
// kUnknown for types ndtrace does not name (packed, complex, ...).
format::DType CudnnDType(int64_t type);

// Its name as records carry it ("float32", ...), or "cudnn_dtype_<N>" when unknown.
std::string CudnnDTypeText(int64_t type);

}  // namespace ndt::tracer
