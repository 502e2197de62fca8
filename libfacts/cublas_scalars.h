// cuBLAS: the type of alpha and beta for a compute type (cublasGemmEx's documentation). Needs
// <cublas_api.h>.
#pragma once

#include <cublas_api.h>

namespace ndt::libfacts {

// The cudaDataType of alpha and beta for `compute` (a cublasComputeType_t); -1 (cublasSgemm_v2,
// no compute type) means C's type `c_type`.
inline int ScaleTypeOfCompute(int compute, int c_type) {
  switch (compute) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return CUDA_R_64F;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      return CUDA_R_32I;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      return CUDA_R_16F;
    case -1:
      return c_type;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace ndt::libfacts
