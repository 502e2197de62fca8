// Host overhead of the library hooks: the same cuBLAS, cuRAND, cuDNN and NCCL calls into the
// stand-in libraries (tests/standin/) or real ones (bench_paths.h), each configuration in its own
// process, in the same run:
//   plain      no tracer;
//   metadata   libndtrace.so preloaded and recording, metadata only (NDTRACE_LIBRARY_DIGESTS=0);
//   digests    recording with the digests of library ops' inputs and outputs (exact extents,
//              tracer/library_support.h), on the GPU path (the default; on the stand-in its
//              kernels run on the CPU);
//   cpu        the same on the CPU path (NDTRACE_DIGEST_DEVICE=cpu: synchronise, copy, digest).
// Prints ns per call (median, p99) and each traced median as a ratio to the plain one, and for
// the ops that digest (a GEMM, a convolution, a cuRAND generate) what the digests add over
// metadata, as a ratio to the plain call.
//
// The calls reach our hooks the way a program linked against the library does: the library is
// loaded RTLD_GLOBAL and each function looked up with dlsym(RTLD_DEFAULT), which finds the
// preloaded tracer's definition first when it is there.
//
// Calls follow each other at once by default: the records of small library calls (a GEMM's
// are large) then come faster than the tracer's encoder thread encodes them on a small machine,
// and the traced figures show the encoder's pace. `--gap NS` makes the process work (spin) NS
// ns between calls, as a program does, so that they show the hook.
//
// Usage: bench_library_hooks [CALLS] [--gap NS]   (default 20000 per call kind; a tenth of
//                                                 that for the 64x64x64 GEMM and the
//                                                 convolution)
//        bench_library_hooks --child CALLS [--only LABEL] [--no-clock] [--gap NS]
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
long g_gap_ns = 0;  // --gap

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
    ndt::bench::Work(g_gap_ns);
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
  constexpr size_t kDeviceFloats = 3 * 4096 + 3 * 1024 + 4096;
  Require(malloc(reinterpret_cast<void**>(&device), kDeviceFloats * sizeof(float)) == cudaSuccess,
          "cudaMalloc");
  Require(NDT_FIND(cudaMemset)(device, 0, kDeviceFloats * sizeof(float)) == cudaSuccess,
          "cudaMemset");

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
  // 64x64x64: 16 KiB per matrix, A and B digested before the call and C after it.
  Time("cublasSgemm_v2(64x64x64)", std::max(1L, calls / 10), [&](long) {
    sgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, device, 64, device + 4096, 64, &zero,
          device + 8192, 64);
  });

  // The cuBLASLt matmul PyTorch's Linear layers make, 4x4x4, the library's own algo choice.
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  Require(NDT_FIND(cublasLtCreate)(&lt) == CUBLAS_STATUS_SUCCESS &&
              NDT_FIND(cublasLtMatmulDescCreate)(&matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                  CUBLAS_STATUS_SUCCESS &&
              NDT_FIND(cublasLtMatrixLayoutCreate)(&layout, CUDA_R_32F, 4, 4, 4) ==
                  CUBLAS_STATUS_SUCCESS,
          "cublasLt set-up");
  const auto lt_matmul = NDT_FIND(cublasLtMatmul);
  Time("cublasLtMatmul(4x4x4)", calls, [&](long) {
    lt_matmul(lt, matmul, &one, device, layout, device + 16, layout, &zero, device + 32, layout,
              device + 32, layout, nullptr, nullptr, 0, nullptr);
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
  Time("curandGenerateUniform(4096)", calls, [&](long) { uniform(generator, device, 4096); });

  cudnnTensorDescriptor_t tensor = nullptr;
  Require(NDT_FIND(cudnnCreateTensorDescriptor)(&tensor) == CUDNN_STATUS_SUCCESS,
          "cudnnCreateTensorDescriptor");
  const auto set_tensor = NDT_FIND(cudnnSetTensor4dDescriptor);
  Time("cudnnSetTensor4dDescriptor", calls, [&](long i) {
    set_tensor(tensor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1 + static_cast<int>(i % 4), 4);
  });

  // A 3x3 convolution of a 4x4x8x8 image with 4 filters (4 KiB in, 4 KiB out; x and w
  // digested before the call, y after it).
  cudnnHandle_t dnn = nullptr;
  Require(NDT_FIND(cudnnCreate)(&dnn) == CUDNN_STATUS_SUCCESS, "cudnnCreate");
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Require(NDT_FIND(cudnnCreateFilterDescriptor)(&filter) == CUDNN_STATUS_SUCCESS &&
              NDT_FIND(cudnnCreateConvolutionDescriptor)(&conv) == CUDNN_STATUS_SUCCESS,
          "cudnnCreate*Descriptor");
  Require(set_tensor(tensor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 4, 4, 8, 8) ==
                  CUDNN_STATUS_SUCCESS &&
              NDT_FIND(cudnnSetFilter4dDescriptor)(filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4,
                                                   4, 3, 3) == CUDNN_STATUS_SUCCESS &&
              NDT_FIND(cudnnSetConvolution2dDescriptor)(conv, 1, 1, 1, 1, 1, 1,
                                                        CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS,
          "cudnnSet*Descriptor");
  const auto algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_bytes = 0;
  Require(NDT_FIND(cudnnGetConvolutionForwardWorkspaceSize)(dnn, tensor, filter, conv, tensor,
                                                             algo, &workspace_bytes) ==
              CUDNN_STATUS_SUCCESS,
          "cudnnGetConvolutionForwardWorkspaceSize");
  void* workspace = nullptr;
  if (workspace_bytes != 0) {
    Require(malloc(&workspace, workspace_bytes) == cudaSuccess, "cudaMalloc (workspace)");
  }
  const auto convolve = NDT_FIND(cudnnConvolutionForward);
  float* x = device + 3 * 4096;
  Time("cudnnConvolutionForward(4x4x8x8)", std::max(1L, calls / 10), [&](long) {
    convolve(dnn, &one, tensor, x, filter, x + 1024, conv, algo, workspace, workspace_bytes,
             &zero, tensor, x + 2048);
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

// A configuration of the measured process: the tracer's environment, or none for plain.
struct Config {
  const char* label;
  bool traced;
  const char* environment;
};
constexpr Config kConfigs[] = {
    {"plain", false, ""},
    {"metadata", true, "NDTRACE_LIBRARY_DIGESTS=0 "},
    {"digests", true, "NDTRACE_LIBRARY_DIGESTS=1 "},
    {"cpu", true, "NDTRACE_LIBRARY_DIGESTS=1 NDTRACE_DIGEST_DEVICE=cpu "},
};

std::map<std::string, Result> Measure(const std::string& self, long calls, long gap_ns,
                                      const Config& config) {
  std::string command = "LD_LIBRARY_PATH='" + ndt::bench::LibraryPath() + "' ";
  if (config.traced) {
    command += "LD_PRELOAD='" + ndt::bench::TracerPath() +
               "' NDTRACE_OUTPUT=/tmp/ndt_bench_library_hooks.ndt "
               "NDTRACE_QUIET=1 NDTRACE_DIGEST_EXIT=0 " +
               std::string(config.environment);
  }
  command += "'" + self + "' --child " + std::to_string(calls) + " --gap " +
             std::to_string(gap_ns);
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

double Ratio(long a, long b) { return static_cast<double>(a) / static_cast<double>(std::max(1L, b)); }

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) {
    for (int i = 3; i < argc; ++i) {
      if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
        g_only = argv[++i];
      } else if (std::strcmp(argv[i], "--no-clock") == 0) {
        g_clock = false;
      } else if (std::strcmp(argv[i], "--gap") == 0 && i + 1 < argc) {
        g_gap_ns = ndt::bench::ParseGap(argv[++i]);
      }
    }
    return Child(std::atol(argv[2]));
  }
  long calls = 20000;
  long gap_ns = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gap") == 0 && i + 1 < argc) {
      gap_ns = ndt::bench::ParseGap(argv[++i]);
    } else if (std::atol(argv[i]) > 0) {
      calls = std::atol(argv[i]);
    } else {
      std::fprintf(stderr, "usage: bench_library_hooks [CALLS] [--gap NS]\n");
      return 2;
    }
  }
  std::vector<std::map<std::string, Result>> results;
  for (const Config& config : kConfigs) {
    // Each configuration's time on stderr as it ends: where a run cut short by a time limit
    // got to (the table comes only at the end).
    const Clock::time_point start = Clock::now();
    results.push_back(Measure(argv[0], calls, gap_ns, config));
    std::fprintf(stderr, "bench_library_hooks: %s took %.2f s\n", config.label,
                 std::chrono::duration<double>(Clock::now() - start).count());
  }
  const auto& plain = results[0];
  std::printf(
      "library calls into the libraries of LD_LIBRARY_PATH='%s', %ld calls each per process "
      "(a tenth for the 64x64x64 GEMM and the convolution); traced = hooked and recorded: "
      "metadata only, with library digests on the GPU path (on the stand-in its kernels run on "
      "the CPU), with library digests on the CPU path; %ld ns of work between calls\n",
      ndt::bench::LibraryPath().c_str(), calls, gap_ns);
  std::printf("%-34s %9s %9s %6s %9s %6s %9s %6s %8s\n", "median ns", "plain", "metadata",
              "ratio", "digests", "ratio", "cpu", "ratio", "digest/call");
  for (const auto& [label, base] : plain) {
    const long meta = results[1].at(label).median;
    const long gpu = results[2].at(label).median;
    const long cpu = results[3].at(label).median;
    std::printf("%-34s %9ld %9ld %6.2f %9ld %6.2f %9ld %6.2f %8.2f\n", label.c_str(), base.median,
                meta, Ratio(meta, base.median), gpu, Ratio(gpu, base.median), cpu,
                Ratio(cpu, base.median), Ratio(gpu - meta, base.median));
  }
  std::printf("%-34s %9s %9s %6s %9s %6s %9s %6s\n", "p99 ns", "plain", "metadata", "", "digests",
              "", "cpu", "");
  for (const auto& [label, base] : plain) {
    std::printf("%-34s %9ld %9ld %6s %9ld %6s %9ld\n", label.c_str(), base.p99,
                results[1].at(label).p99, "", results[2].at(label).p99, "",
                results[3].at(label).p99);
  }
  std::printf(
      "(ratio = traced median / plain median; digest/call = (digests - metadata) / plain, "
      "medians: what the GPU-path digests add, as a ratio to the call itself)\n");
  return 0;
}
