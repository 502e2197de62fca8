// Host overhead of the library hooks: the same cuBLAS, cuRAND, cuDNN and NCCL calls into the
// stand-in libraries (tests/standin/) or real ones (bench_paths.h), once plain and once with
// libndtrace.so preloaded and recording (metadata only: NDTRACE_LIBRARY_DIGESTS=0), each in its
// own process, in the same run. Prints ns per call (median, p99) and the ratio, per call.
//
// The calls reach our hooks the way a program linked against the library does: the library is
// loaded RTLD_GLOBAL and each function looked up with dlsym(RTLD_DEFAULT), which finds the
// preloaded tracer's definition first when it is there.
//
// Usage: bench_library_hooks [CALLS]        (default 20000 per call kind)
//        bench_library_hooks --child CALLS [--only LABEL] [--no-clock]
//                                          (internal: the measured process; LABEL as printed)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <curand.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_paths.h"

namespace {

using Clock = std::chrono::steady_clock;

void* Load(const char* soname) {
  void* library = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    std::fprintf(stderr, "error: %s\n", dlerror());
    std::exit(3);
  }
  return library;
}

// `name` as the program would bind it: the tracer's hook when it is preloaded.
template <typename Fn>
Fn Find(const char* name) {
  void* found = dlsym(RTLD_DEFAULT, name);
  if (found == nullptr) {
    std::fprintf(stderr, "error: %s not found\n", name);
    std::exit(3);
  }
  return reinterpret_cast<Fn>(found);
}
#define NDT_FIND(name) Find<decltype(&::name)>(#name)

void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "error: %s failed\n", what);
  std::exit(3);
}

// --only LABEL: the one call kind the measured process makes (null: all); --no-clock: make the
// calls without timing them (callgrind_hooks.sh counts their instructions instead).
const char* g_only = nullptr;
bool g_clock = true;

// Times `call` `calls` times; prints "<label> <median ns> <p99 ns>".
void Time(const char* label, long calls, const std::function<void(long)>& call) {
  if (g_only != nullptr && std::strcmp(g_only, label) != 0) return;
  if (!g_clock) {
    for (long i = 0; i < calls; ++i) call(i);
    return;
  }
  std::vector<long> ns(calls);
  for (long i = 0; i < calls; ++i) {
    const auto start = Clock::now();
    call(i);
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }
  std::sort(ns.begin(), ns.end());
  std::printf("%s %ld %ld\n", label, ns[calls / 2], ns[calls * 99 / 100]);
}

int Child(long calls) {
  for (const char* soname : {"libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
                             "libcurand.so.10", "libcudnn.so.9", "libnccl.so.2"}) {
    Load(soname);
  }
  float* device = nullptr;
  Require(NDT_FIND(cudaSetDevice)(0) == cudaSuccess, "cudaSetDevice");
  const auto malloc = Find<cudaError_t (*)(void**, size_t)>("cudaMalloc");  // C++ overloads it
  Require(malloc(reinterpret_cast<void**>(&device), 3 * 16 * sizeof(float)) == cudaSuccess,
          "cudaMalloc");

  cublasHandle_t blas = nullptr;
  Require(NDT_FIND(cublasCreate_v2)(&blas) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
  const auto set_math = NDT_FIND(cublasSetMathMode);
  Time("cublasSetMathMode", calls, [&](long) { set_math(blas, CUBLAS_DEFAULT_MATH); });
  const auto sgemm = NDT_FIND(cublasSgemm_v2);
  const float one = 1.0f, zero = 0.0f;
  Time("cublasSgemm_v2(4x4x4)", calls, [&](long) {
    sgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, device, 4, device + 16, 4, &zero,
          device + 32, 4);
  });

  curandGenerator_t generator = nullptr;
  Require(NDT_FIND(curandCreateGenerator)(&generator, CURAND_RNG_PSEUDO_PHILOX4_32_10) ==
              CURAND_STATUS_SUCCESS,
          "curandCreateGenerator");
  const auto set_offset = NDT_FIND(curandSetGeneratorOffset);
  Time("curandSetGeneratorOffset", calls,
       [&](long i) { set_offset(generator, static_cast<unsigned long long>(i)); });
  const auto uniform = NDT_FIND(curandGenerateUniform);
  Time("curandGenerateUniform(4)", calls, [&](long) { uniform(generator, device, 4); });

  cudnnTensorDescriptor_t tensor = nullptr;
  Require(NDT_FIND(cudnnCreateTensorDescriptor)(&tensor) == CUDNN_STATUS_SUCCESS,
          "cudnnCreateTensorDescriptor");
  const auto set_tensor = NDT_FIND(cudnnSetTensor4dDescriptor);
  Time("cudnnSetTensor4dDescriptor", calls, [&](long i) {
    set_tensor(tensor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1 + static_cast<int>(i % 4), 4);
  });

  const auto group_start = NDT_FIND(ncclGroupStart);
  const auto group_end = NDT_FIND(ncclGroupEnd);
  Time("ncclGroupStart+End", calls, [&](long) {
    group_start();
    group_end();
  });
  return 0;
}

struct Result {
  long median = 0;
  long p99 = 0;
};

std::map<std::string, Result> Measure(const std::string& self, long calls, bool traced) {
  std::string command = "LD_LIBRARY_PATH='" + ndt::bench::LibraryPath() + "' ";
  if (traced) {
    command += "LD_PRELOAD='" + ndt::bench::TracerPath() +
               "' NDTRACE_OUTPUT=/tmp/ndt_bench_library_hooks.ndt "
               "NDTRACE_QUIET=1 NDTRACE_DIGEST_EXIT=0 NDTRACE_LIBRARY_DIGESTS=0 ";
  }
  command += "'" + self + "' --child " + std::to_string(calls);
  FILE* pipe = popen(command.c_str(), "r");
  std::map<std::string, Result> results;
  char label[128];
  Result result;
  while (pipe != nullptr &&
         std::fscanf(pipe, "%127s %ld %ld", label, &result.median, &result.p99) == 3) {
    results[label] = result;
  }
  if (pipe == nullptr || pclose(pipe) != 0 || results.empty()) {
    std::fprintf(stderr, "error: the measured process failed: %s\n", command.c_str());
    std::exit(3);
  }
  std::remove("/tmp/ndt_bench_library_hooks.ndt");
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) {
    for (int i = 3; i < argc; ++i) {
      if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
        g_only = argv[++i];
      } else if (std::strcmp(argv[i], "--no-clock") == 0) {
        g_clock = false;
      }
    }
    return Child(std::atol(argv[2]));
  }
  const long calls = argc > 1 ? std::atol(argv[1]) : 20000;
  const auto plain = Measure(argv[0], calls, false);
  const auto traced = Measure(argv[0], calls, true);
  std::printf(
      "library calls into the libraries of LD_LIBRARY_PATH='%s', %ld calls each per "
      "process; traced = hooked and recorded, metadata only\n",
      ndt::bench::LibraryPath().c_str(), calls);
  std::printf("%-28s %10s %10s %10s %10s %8s\n", "", "plain p50", "plain p99", "traced p50",
              "traced p99", "ratio");
  for (const auto& [label, base] : plain) {
    const Result& hooked = traced.at(label);
    std::printf("%-28s %10ld %10ld %10ld %10ld %8.2f\n", label.c_str(), base.median, base.p99,
                hooked.median, hooked.p99,
                static_cast<double>(hooked.median) / std::max(1L, base.median));
  }
  std::printf("(ns per call; ratio = traced median / plain median)\n");
  return 0;
}
