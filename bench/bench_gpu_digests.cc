// Cost of a per-op digest while recording: the same memsets into one allocation, recorded with
// the digest window on (each memset gets its destination allocation's digest), with the digests
// computed on the GPU (the digest kernels into the mapped pinned ring, no host synchronisation)
// and on the CPU (NDTRACE_DIGEST_DEVICE=cpu: synchronise, copy, digest on the host); baselines in
// the same run: the calls untraced, and recorded without digests. Each in its own process.
//
// On the stand-in device the "GPU" kernels are host functions run when they are enqueued, so
// there both paths read the bytes on the CPU: the figures show the tracer's own cost around a
// digest (launches, ring, held records versus synchronisation and copy), not GPU figures. The
// device name is printed; run it with the real driver first on the library path for GPU figures.
//
// Usage: bench_gpu_digests [CALLS [BYTES]]   (default 4000 calls, 4 KiB)
//        bench_gpu_digests --child CALLS BYTES (internal: the measured process)
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_paths.h"

namespace {

using Clock = std::chrono::steady_clock;
using ndt::bench::ResolveDriver;

// Reaches the driver the way cudart does, times `calls` memsets of `bytes` bytes one by one
// (each followed by nothing: the program never synchronises until the end), then one context
// synchronisation; prints "device name", then "median_ns p99_ns total_ns".
int Child(long calls, long bytes) {
  void* gpa = ndt::bench::DriverProcAddress();
  auto init = ResolveDriver<CUresult (*)(unsigned)>(gpa, "cuInit");
  auto device_get = ResolveDriver<CUresult (*)(CUdevice*, int)>(gpa, "cuDeviceGet");
  auto device_name = ResolveDriver<CUresult (*)(char*, int, CUdevice)>(gpa, "cuDeviceGetName");
  auto retain = ResolveDriver<CUresult (*)(CUcontext*, CUdevice)>(gpa, "cuDevicePrimaryCtxRetain");
  auto set_current = ResolveDriver<CUresult (*)(CUcontext)>(gpa, "cuCtxSetCurrent");
  auto alloc = ResolveDriver<CUresult (*)(CUdeviceptr*, size_t)>(gpa, "cuMemAlloc");
  using MemsetAsync = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
  auto memset = ResolveDriver<MemsetAsync>(gpa, "cuMemsetD8Async");
  auto synchronize = ResolveDriver<PFN_cuCtxSynchronize_v13000>(gpa, "cuCtxSynchronize");
  CUdevice device;
  CUcontext context;
  CUdeviceptr buffer;
  char name[256] = {};
  if (init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
      device_name(name, sizeof(name) - 1, device) != CUDA_SUCCESS ||
      retain(&context, device) != CUDA_SUCCESS || set_current(context) != CUDA_SUCCESS ||
      alloc(&buffer, static_cast<size_t>(bytes)) != CUDA_SUCCESS) {
    std::fprintf(stderr, "error: driver setup failed\n");
    return 3;
  }
  std::vector<long> ns(calls);
  const auto begin = Clock::now();
  for (long i = 0; i < calls; ++i) {
    const auto start = Clock::now();
    memset(buffer, static_cast<unsigned char>(i), static_cast<size_t>(bytes), nullptr);
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }
  synchronize(nullptr);
  const long total =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count();
  std::sort(ns.begin(), ns.end());
  std::printf("%s\n%ld %ld %ld\n", name, ns[calls / 2], ns[calls * 99 / 100], total);
  return 0;
}

struct Result {
  std::string device;
  long median = 0;
  long p99 = 0;
  long total = 0;
};

// `environment`: empty for an untraced run, else the NDTRACE_* settings of a recorded one.
Result Measure(const std::string& self, long calls, long bytes, const std::string& environment) {
  std::string command = "LD_LIBRARY_PATH='" NDT_STANDIN_DIR "' ";
  if (!environment.empty()) {
    command += "LD_PRELOAD='" NDT_TRACER_LIB
               "' NDTRACE_OUTPUT=/tmp/ndt_bench_gpu_digests.ndt "
               "NDTRACE_QUIET=1 NDTRACE_DIGEST_EXIT=0 " +
               environment + " ";
  }
  command += "'" + self + "' --child " + std::to_string(calls) + " " + std::to_string(bytes);
  FILE* pipe = popen(command.c_str(), "r");
  Result result;
  char name[256] = {};
  if (pipe == nullptr || std::fscanf(pipe, " %255[^\n]", name) != 1 ||
      std::fscanf(pipe, "%ld %ld %ld", &result.median, &result.p99, &result.total) != 3) {
    std::fprintf(stderr, "error: the measured process failed: %s\n", command.c_str());
    std::exit(3);
  }
  pclose(pipe);
  result.device = name;
  std::remove("/tmp/ndt_bench_gpu_digests.ndt");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) {
    return Child(std::atol(argv[2]), std::atol(argv[3]));
  }
  const long calls = argc > 1 ? std::atol(argv[1]) : 4000;
  const long bytes = argc > 2 ? std::atol(argv[2]) : 4096;
  if (calls < 1 || bytes < 1) {
    std::fprintf(stderr, "usage: bench_gpu_digests [CALLS >= 1 [BYTES >= 1]]\n");
    return 2;
  }
  const Result plain = Measure(argv[0], calls, bytes, "");
  const Result recorded = Measure(argv[0], calls, bytes, "NDTRACE_DIGEST_DEVICE=gpu");
  const Result gpu =
      Measure(argv[0], calls, bytes, "NDTRACE_DIGEST_DEVICE=gpu NDTRACE_DIGEST_WINDOW=0:");
  const Result cpu =
      Measure(argv[0], calls, bytes, "NDTRACE_DIGEST_DEVICE=cpu NDTRACE_DIGEST_WINDOW=0:");
  std::printf("cuMemsetD8Async of %ld bytes, %ld calls per process, on \"%s\"\n", bytes, calls,
              plain.device.c_str());
  if (plain.device == "ndtrace stand-in device") {
    std::printf(
        "(stand-in device: the digest kernels run on the CPU when enqueued; these are "
        "not GPU figures)\n");
  }
  std::printf("%-34s %10s %10s %12s\n", "", "median ns", "p99 ns", "total ms");
  const auto row = [&](const char* label, const Result& r) {
    std::printf("%-34s %10ld %10ld %12.2f\n", label, r.median, r.p99, r.total / 1e6);
  };
  row("untraced", plain);
  row("recorded, no digests", recorded);
  row("recorded, digest per op on GPU", gpu);
  row("recorded, digest per op on CPU", cpu);
  const double base = static_cast<double>(std::max(1L, recorded.median));
  std::printf("per digest (median over recorded, no digests): GPU path %ld ns, CPU path %ld ns\n",
              gpu.median - recorded.median, cpu.median - recorded.median);
  std::printf(
      "ratio to recorded without digests (median): GPU path %.2f, CPU path %.2f; "
      "CPU / GPU %.2f\n",
      gpu.median / base, cpu.median / base,
      static_cast<double>(cpu.median) / std::max(1L, gpu.median));
  return 0;
}
