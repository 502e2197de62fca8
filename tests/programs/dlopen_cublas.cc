// dlopen_cublas: cuBLAS reached the way plugin-style frameworks reach it — dlopen of
// libcublas.so.13 with RTLD_LOCAL and dlsym of each function, no link to it — so the tracer
// must hand out its hooks from dlsym to see the calls. Plain C++ linked to the real
// libcudart.so.13 only.
//
//   dlopen_cublas
//
// One cublasSgemm_v2 (C = A B, 16 x 16 x 64). Prints "checksum <hex>" of C.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_checksum.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "dlopen_cublas: %s\n", what);
  std::exit(1);
}

template <typename Function>
Function Lookup(void* library, const char* name) {
  void* found = dlsym(library, name);
  if (found == nullptr) Fail(name);
  return reinterpret_cast<Function>(found);
}

}  // namespace

int main() {
  void* library = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) Fail(dlerror());
  const auto create = Lookup<decltype(&cublasCreate_v2)>(library, "cublasCreate_v2");
  const auto sgemm = Lookup<decltype(&cublasSgemm_v2)>(library, "cublasSgemm_v2");
  const auto destroy = Lookup<decltype(&cublasDestroy_v2)>(library, "cublasDestroy_v2");

  constexpr int kM = 16, kN = 16, kK = 64;
  std::vector<float> a(kM * kK), b(kK * kN), c(kM * kN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.5f;
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  if (cudaMalloc(&da, a.size() * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&db, b.size() * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&dc, c.size() * sizeof(float)) != cudaSuccess) {
    Fail("cudaMalloc");
  }
  cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);

  cublasHandle_t handle = nullptr;
  if (create(&handle) != CUBLAS_STATUS_SUCCESS) Fail("cublasCreate_v2");
  const float one = 1.0f, zero = 0.0f;
  if (sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, kM, kN, kK, &one, da, kM, db, kK, &zero, dc, kM) !=
      CUBLAS_STATUS_SUCCESS) {
    Fail("cublasSgemm_v2");
  }
  if (cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
    Fail("cudaMemcpy");
  }
  destroy(handle);
  ndt::programs::PrintChecksum(c.data(), c.size() * sizeof(float));
  return 0;
}
