// What the parts of the stand-in libcudnn.so.9 share: standin_cudnn.cc (handles, the legacy
// convolution API), standin_cudnn_ops.cc (activation, pooling, softmax, cudnnAddTensor),
// standin_cudnn_rnn.cc (the RNN API) and standin_cudnn_backend.cc (the backend API).
//
// The stand-in reaches the driver only as the real cuDNN does: dlopen("libcuda.so.1"),
// dlsym("cuGetProcAddress_v2"), then cuGetProcAddress_v2(<base name>, ..., 13000, ...) per
// function. It computes on the host (stand-in device memory is host memory) after
// synchronising the handle's stream.
#pragma once

#include "standin_atomic.h"

#include <cuda.h>
#include <cudnn.h>

#include <functional>

// The object behind a cudnnHandle_t (cudnnCreate/cudnnDestroy in standin_cudnn.cc).
struct cudnnContext {
  CUstream stream = nullptr;  // cudnnSetStream; null = the legacy default stream
};

// The object behind a cudnnTensorDescriptor_t: 4-d (cudnnSetTensor4dDescriptor[Ex]), or 3-d
// (cudnnSetTensorNdDescriptor, standin_cudnn_rnn.cc: the RNN's hidden and cell states), stored
// with dims[3] = strides[3] = 1.
struct cudnnTensorStruct {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  int dims[4] = {0, 0, 0, 0};     // n, c, h, w
  int strides[4] = {0, 0, 0, 0};  // in elements
  int nb_dims = 4;
  bool set = false;
};

namespace ndt::standin {

// The driver functions the stand-in cuDNN uses, found once through cuGetProcAddress_v2 (legacy
// default-stream semantics). A member is null when the driver or the function is missing.
// Any thread.
struct CudnnDriver {
  CUresult (*stream_synchronize)(CUstream) = nullptr;     // cuStreamSynchronize
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;  // cuMemAlloc (_v2)
  CUresult (*mem_free)(CUdeviceptr) = nullptr;            // cuMemFree (_v2)
};
const CudnnDriver& CudnnDriverFunctions();

// Waits for the work queued so far on `handle`'s stream: CUDNN_STATUS_SUCCESS, or
// CUDNN_STATUS_EXECUTION_FAILED when the driver is missing or the stream fails.
cudnnStatus_t SynchronizeHandle(cudnnHandle_t handle);


// Runs `work(thread, threads, yield)` on `threads` threads that start together (a thread that
// cannot be started has its share run on the caller afterwards) and joins them. `yield()`
// gives the processor up after a random number of calls (drawn from std::random_device), so
// the interleaving of atomic additions varies from run to run even on one core. For the
// genuinely nondeterministic ("atomics") algorithms and engines.
void RunRacing(
    int threads,
    const std::function<void(int thread, int threads, const std::function<void()>& yield)>& work);

}  // namespace ndt::standin
