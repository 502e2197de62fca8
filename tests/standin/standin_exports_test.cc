// Every stand-in CUDA library exports every function its real library exports
// (standin_<lib>_entry_points.inc, from entry_points.sh): a program built against the real
// library loads, and what the stand-in does not implement fails with the library's "not
// supported" status (standin_library_stubs.cc) instead of a loader error. The libraries are
// dlopen()ed by path; they find the stand-in libcuda.so.1 through LD_LIBRARY_PATH (set by CTest).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <cupti.h>
#include <curand.h>
#include <dlfcn.h>
#include <nccl.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace {

void* Library(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  INFO(path << ": " << dlerror());
  REQUIRE(handle != nullptr);
  return handle;
}

template <typename Fn>
Fn* Get(void* library, const char* name) {
  auto* fn = reinterpret_cast<Fn*>(dlsym(library, name));
  INFO(name);
  REQUIRE(fn != nullptr);
  return fn;
}

#define NDT_GET(library, name) Get<decltype(name)>(library, #name)

// Each name the .inc lists is exported by `library`; there are at least `at_least`.
void CheckExports(void* library, const std::vector<const char*>& names, size_t at_least) {
  CHECK(names.size() >= at_least);
  for (const char* name : names) {
    INFO(name);
    CHECK(dlsym(library, name) != nullptr);
  }
}

}  // namespace

#define NDT_ENTRY_POINT(name) #name,

TEST_CASE("the stand-in cuBLAS and cuBLASLt export every function of the real ones", "[standin]") {
  void* cublas = Library(NDT_STANDIN_LIBCUBLAS);
  void* lt = Library(NDT_STANDIN_LIBCUBLASLT);
  CheckExports(cublas,
               {
#include "standin_cublas_entry_points.inc"
               },
               700);
  CheckExports(lt,
               {
#include "standin_cublaslt_entry_points.inc"
               },
               150);
  // Unimplemented: the status says so.
  CHECK(NDT_GET(cublas, cublasDtrsm_v2)(nullptr, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER,
                                        CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 1, 1, nullptr, nullptr, 1,
                                        nullptr, 1) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(NDT_GET(lt, cublasLtMatrixTransform)(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             nullptr, nullptr, nullptr, nullptr,
                                             nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
  // What returns a pointer or a number is implemented.
  CHECK(std::string(NDT_GET(cublas, cublasGetStatusName)(CUBLAS_STATUS_NOT_SUPPORTED)) ==
        "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(std::strlen(NDT_GET(cublas, cublasGetStatusString)(CUBLAS_STATUS_INVALID_VALUE)) > 0);
  CHECK(std::string(NDT_GET(lt, cublasLtGetStatusName)(CUBLAS_STATUS_SUCCESS)) ==
        "CUBLAS_STATUS_SUCCESS");
  CHECK(std::strlen(NDT_GET(lt, cublasLtGetStatusString)(CUBLAS_STATUS_ALLOC_FAILED)) > 0);
  CHECK(NDT_GET(cublas, cublasGetCudartVersion)() == CUDA_VERSION);
  CHECK(NDT_GET(lt, cublasLtGetCudartVersion)() == CUDA_VERSION);
  CHECK(NDT_GET(lt, cublasLtGetVersion)() == CUBLAS_VERSION);
  int major = 0;
  CHECK(NDT_GET(cublas, cublasGetProperty)(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS);
  CHECK(major == CUBLAS_VER_MAJOR);
  // Implemented functions are not shadowed by their stubs.
  cublasHandle_t handle = nullptr;
  REQUIRE(NDT_GET(cublas, cublasCreate_v2)(&handle) == CUBLAS_STATUS_SUCCESS);
  cublasMath_t mode = CUBLAS_PEDANTIC_MATH;
  CHECK(NDT_GET(cublas, cublasGetMathMode)(handle, &mode) == CUBLAS_STATUS_SUCCESS);
  CHECK(NDT_GET(cublas, cublasDestroy_v2)(handle) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("the stand-in cuRAND, cuDNN and CUPTI export every function of the real ones",
          "[standin]") {
  void* curand = Library(NDT_STANDIN_LIBCURAND);
  void* cudnn = Library(NDT_STANDIN_LIBCUDNN);
  void* cupti = Library(NDT_STANDIN_LIBCUPTI);
  CheckExports(curand,
               {
#include "standin_curand_entry_points.inc"
               },
               25);
  CheckExports(cudnn,
               {
#include "standin_cudnn_entry_points.inc"
               },
               200);
  CheckExports(cupti,
               {
#include "standin_cupti_entry_points.inc"
               },
               150);
  CHECK(NDT_GET(curand, curandGenerateLongLong)(nullptr, nullptr, 0) ==
        CURAND_STATUS_ARCH_MISMATCH);
  CHECK(NDT_GET(cudnn, cudnnCTCLoss)(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     nullptr, nullptr, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, nullptr,
                                     nullptr, 0) == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK(NDT_GET(cupti, cuptiActivityFlushPeriod)(10) == CUPTI_ERROR_NOT_SUPPORTED);
  CHECK(NDT_GET(cudnn, cudnnGetVersion)() == CUDNN_VERSION);
  CHECK(NDT_GET(cudnn, cudnnGetCudartVersion)() == CUDA_VERSION);
  CHECK(std::string(NDT_GET(cudnn, cudnnGetErrorString)(CUDNN_STATUS_NOT_SUPPORTED)) ==
        "CUDNN_STATUS_NOT_SUPPORTED");
  int version = 0;
  CHECK(NDT_GET(curand, curandGetVersion)(&version) == CURAND_STATUS_SUCCESS);
  CHECK(version == CURAND_VERSION);
}

TEST_CASE("the stand-in NCCL exports every function of the real one, each pnccl twin too",
          "[standin]") {
  void* nccl = Library(NDT_STANDIN_LIBNCCL);
  CheckExports(nccl,
               {
#include "standin_nccl_entry_points.inc"
               },
               100);
  ncclComm_t shrunk = nullptr;
  CHECK(NDT_GET(nccl, ncclCommShrink)(nullptr, nullptr, 0, &shrunk, nullptr, 0) ==
        ncclInvalidUsage);
  // An implemented ncclX is its pncclX, never a stub.
  for (const char* name : {"ncclAllReduce", "ncclCommInitRank", "ncclGetVersion",
                           "ncclCommGetAsyncError", "ncclRedOpCreatePreMulSum"}) {
    INFO(name);
    CHECK(dlsym(nccl, name) == dlsym(nccl, ("p" + std::string(name)).c_str()));
  }
  int version = 0;
  CHECK(NDT_GET(nccl, ncclGetVersion)(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
}
