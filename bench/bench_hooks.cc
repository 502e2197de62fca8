// Host overhead of an intercepted driver call: the same calls into the stand-in driver
// (tests/standin/), or a real one (bench_paths.h), once plain and once with libndtrace.so
// preloaded and recording, each in its own process, in the same run. Prints ns per call
// (median, p99) and the overhead, per case and number of calling threads.
//
// Cases (each recorded as one op, no digests, so the difference is the hook plus the record's
// append):
//   memset  cuMemsetD8_v2 on a 16-byte allocation (cheap on the stand-in);
//   launch  cuLaunchKernel of VectorAdd(a, b, c, n) with three pointer arguments into known
//           allocations and n = 1, grid 1x1x1, block 1x1x1 (the stand-in runs one element);
//   stream  the same launch on a stream the calling thread created (cuStreamCreate), as a data
//           loader's copy thread, DDP's communication or a program's side streams launch;
//   model   launches shaped like a model's step: each call one of kModelKernels kernel handles
//           (the VectorAdd image loaded as that many modules, as a program has many kernels),
//           in turn, its three pointers tensors of a caching allocator's segments
//           (kModelSegments blocks of 4 MiB, kModelTensors tensors at offsets in them, none at
//           a block's base), as PyTorch's allocator hands out; what lookups of kernels and
//           allocations cost when a thread's recent ones are many.
// With T threads, T threads call at once (each its own buffers), started together; the median
// and p99 are over every call of every thread.
//
// By default the calls follow each other at once: more records a second than the tracer's
// encoder thread can encode on a small machine, so the rings fill, and the figures show the
// encoder's pace as much as the hook's. `--gap NS` makes each thread work (spin) NS ns between
// calls, as a program does between its launches (a PyTorch eager step spends microseconds of
// host time per kernel): the hook's cost while the encoder keeps up.
//
// Usage: bench_hooks [CALLS] [--case memset|launch|stream|model|all] [--threads 1,4] [--gap NS]
//        bench_hooks --child CASE THREADS CALLS [--no-clock] [--gap NS]   (internal: the
//        measured process; --no-clock makes the calls without timing them, for
//        callgrind_hooks.sh)
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_paths.h"
#if NDT_BENCH_VECTOR_ADD_FATBIN
#include "bench/vector_add_fatbin.h"  // kVectorAddFatbin: vector_add_kernel.cu built by nvcc
#endif

namespace {

using Clock = std::chrono::steady_clock;

// The launch case's kernel, by its mangled name.
constexpr char kVectorAdd[] = "_Z9VectorAddPKfS0_Pfi";
#if !NDT_BENCH_VECTOR_ADD_FATBIN
// Without nvcc: a fat binary (bare, as the stand-in and the tracer read it) naming it; only the
// stand-in loads it.
std::vector<uint64_t> VectorAddImage() {
  const std::string payload = std::string(kVectorAdd) + '\0';
  const uint64_t padded = (payload.size() + 7) / 8 * 8;
  std::vector<uint64_t> image(2 + padded / 8, 0);
  image[0] = 0x0010'0001'BA55'ED50ull;  // u32 magic, u16 version, u16 header size
  image[1] = padded;
  std::memcpy(&image[2], payload.data(), payload.size());
  return image;
}
#endif

struct Driver {
  void* gpa = nullptr;
  CUcontext context = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memset)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUfunction vector_add = nullptr;
  std::vector<CUfunction> model_kernels;  // the model case's
};

constexpr int kModelKernels = 64;
constexpr int kModelSegments = 8;
constexpr int kModelTensors = 64;
constexpr size_t kModelSegmentBytes = size_t{4} << 20;

Driver SetUp(bool launch, bool model) {
  Driver d;
  const ndt::bench::MemsetTarget memset = ndt::bench::SetUpMemset();  // cuInit, primary context
  d.gpa = ndt::bench::DriverProcAddress();
  using ndt::bench::ResolveDriver;
  d.memset = memset.memset;
  d.set_current = ResolveDriver<CUresult (*)(CUcontext)>(d.gpa, "cuCtxSetCurrent");
  d.alloc = ResolveDriver<CUresult (*)(CUdeviceptr*, size_t)>(d.gpa, "cuMemAlloc");
  auto get_current = ResolveDriver<CUresult (*)(CUcontext*)>(d.gpa, "cuCtxGetCurrent");
  if (get_current(&d.context) != CUDA_SUCCESS) std::exit(3);
  if (launch) {
#if NDT_BENCH_VECTOR_ADD_FATBIN
    const void* image = kVectorAddFatbin;
#else
    static const std::vector<uint64_t> bare = VectorAddImage();
    const void* image = bare.data();
#endif
    auto load = ResolveDriver<CUresult (*)(CUmodule*, const void*)>(d.gpa, "cuModuleLoadData");
    auto get = ResolveDriver<CUresult (*)(CUfunction*, CUmodule, const char*)>(
        d.gpa, "cuModuleGetFunction");
    d.launch = reinterpret_cast<decltype(d.launch)>(
        ResolveDriver<void*>(d.gpa, "cuLaunchKernel"));
    d.stream_create = ResolveDriver<CUresult (*)(CUstream*, unsigned)>(d.gpa, "cuStreamCreate");
    for (int i = 0; i < (model ? kModelKernels : 1); ++i) {
      CUmodule module = nullptr;
      if (load(&module, image) != CUDA_SUCCESS ||
          get(&d.vector_add, module, kVectorAdd) != CUDA_SUCCESS) {
        std::fprintf(stderr, "error: cannot load the VectorAdd kernel\n");
        std::exit(3);
      }
      if (model) d.model_kernels.push_back(d.vector_add);
    }
  }
  return d;
}

// One thread's calls: `calls` of the case, each timed into `ns` unless `ns` is null.
void Calls(const Driver& d, bool launch, bool own_stream, long calls, long gap_ns, long* ns,
           std::atomic<int>* ready, int threads) {
  const bool model = !d.model_kernels.empty();
  if (d.set_current(d.context) != CUDA_SUCCESS) std::exit(3);
  CUstream stream = nullptr;
  if (own_stream && d.stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    std::exit(3);
  }
  CUdeviceptr buffers[3] = {};
  for (CUdeviceptr& buffer : buffers) {
    if (d.alloc(&buffer, 16) != CUDA_SUCCESS) std::exit(3);
  }
  // The model case's tensors: in its segments, at 512 KiB steps from 64 KiB past each base.
  std::vector<CUdeviceptr> tensors;
  if (model) {
    CUdeviceptr segments[kModelSegments] = {};
    for (CUdeviceptr& segment : segments) {
      if (d.alloc(&segment, kModelSegmentBytes) != CUDA_SUCCESS) std::exit(3);
    }
    for (int i = 0; i < kModelTensors; ++i) {
      tensors.push_back(segments[i % kModelSegments] + (size_t{64} << 10) +
                        static_cast<size_t>(i / kModelSegments) * (size_t{512} << 10));
    }
  }
  int n = 1;
  void* params[] = {&buffers[0], &buffers[1], &buffers[2], &n};
  CUfunction kernel = d.vector_add;
  ready->fetch_add(1);
  while (ready->load() < threads) {
  }
  for (long i = 0; i < calls; ++i) {
    if (model) {  // the next op's kernel and tensors, before the clock starts
      kernel = d.model_kernels[i % kModelKernels];
      for (int p = 0; p < 3; ++p) buffers[p] = tensors[(i * 3 + p) % kModelTensors];
    }
    const auto start = ns != nullptr ? Clock::now() : Clock::time_point();
    const CUresult result = launch ? d.launch(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr)
                                   : d.memset(buffers[0], static_cast<unsigned char>(i), 16);
    if (result != CUDA_SUCCESS) {
      std::fprintf(stderr, "error: call failed (%d)\n", static_cast<int>(result));
      std::exit(3);
    }
    if (ns != nullptr) {
      ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    }
    ndt::bench::Work(gap_ns);
  }
}

// The measured process: prints "median_ns p99_ns" over every call of every thread. The calls of
// a single thread are made on the main thread.
int Child(const std::string& which, int threads, long calls, long gap_ns, bool clock) {
  const bool own_stream = which == "stream";
  const bool model = which == "model";
  const bool launch = which == "launch" || own_stream || model;
  const Driver d = SetUp(launch, model);
  std::vector<long> ns(clock ? calls * threads : 0);
  std::atomic<int> ready{0};
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back(Calls, std::cref(d), launch, own_stream, calls, gap_ns,
                         clock ? ns.data() + t * calls : nullptr, &ready, threads);
  }
  Calls(d, launch, own_stream, calls, gap_ns, clock ? ns.data() : nullptr, &ready, threads);
  for (std::thread& worker : workers) worker.join();
  if (!clock) return 0;
  std::sort(ns.begin(), ns.end());
  std::printf("%ld %ld\n", ns[ns.size() / 2], ns[ns.size() * 99 / 100]);
  return 0;
}

struct Result {
  long median = 0;
  long p99 = 0;
};

Result Measure(const std::string& self, const std::string& which, int threads, long calls,
               long gap_ns, bool traced) {
  std::string command = "LD_LIBRARY_PATH='" + ndt::bench::LibraryPath() + "' ";
  if (traced) {
    command += "LD_PRELOAD='" + ndt::bench::TracerPath() +
               "' NDTRACE_OUTPUT=/tmp/ndt_bench_hooks.ndt "
               "NDTRACE_QUIET=1 NDTRACE_DIGEST_EXIT=0 ";
  }
  command += "'" + self + "' --child " + which + " " + std::to_string(threads) + " " +
             std::to_string(calls) + " --gap " + std::to_string(gap_ns);
  FILE* pipe = popen(command.c_str(), "r");
  Result result;
  if (pipe == nullptr || std::fscanf(pipe, "%ld %ld", &result.median, &result.p99) != 2 ||
      pclose(pipe) != 0) {
    std::fprintf(stderr, "error: the measured process failed: %s\n", command.c_str());
    std::exit(3);
  }
  std::remove("/tmp/ndt_bench_hooks.ndt");
  return result;
}

std::vector<int> ParseThreads(const char* text) {
  std::vector<int> threads;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long value = std::strtol(p, &end, 10);
    if (end == p || value < 1 || value > 64) {
      std::fprintf(stderr, "error: --threads %s: expected numbers 1 to 64, comma-separated\n",
                   text);
      std::exit(2);
    }
    threads.push_back(static_cast<int>(value));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') {
      std::fprintf(stderr, "error: --threads %s: expected numbers 1 to 64, comma-separated\n",
                   text);
      std::exit(2);
    }
  }
  return threads;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::strcmp(argv[1], "--child") == 0) {
    bool clock = true;
    long gap_ns = 0;
    for (int i = 5; i < argc; ++i) {
      if (std::strcmp(argv[i], "--no-clock") == 0) clock = false;
      if (std::strcmp(argv[i], "--gap") == 0 && i + 1 < argc) gap_ns = std::atol(argv[++i]);
    }
    return Child(argv[2], std::atoi(argv[3]), std::atol(argv[4]), gap_ns, clock);
  }
  long calls = 200000;
  long gap_ns = 0;
  std::vector<std::string> cases = {"memset", "launch", "stream", "model"};
  std::vector<int> threads = {1, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--case" && i + 1 < argc) {
      const std::string which = argv[++i];
      if (which == "all") {
        cases = {"memset", "launch", "stream", "model"};
      } else if (which == "memset" || which == "launch" || which == "stream" || which == "model") {
        cases = {which};
      } else {
        std::fprintf(stderr, "error: --case %s: expected memset, launch, stream, model or all\n",
                     which.c_str());
        return 2;
      }
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = ParseThreads(argv[++i]);
    } else if (arg == "--gap" && i + 1 < argc) {
      gap_ns = ndt::bench::ParseGap(argv[++i]);
    } else if (!arg.empty() && arg[0] != '-' && std::atol(arg.c_str()) > 0) {
      calls = std::atol(arg.c_str());
    } else {
      std::fprintf(
          stderr,
          "usage: bench_hooks [CALLS] [--case memset|launch|stream|model|all] [--threads 1,4] "
          "[--gap NS]\n");
      return 2;
    }
  }
  std::printf(
      "driver calls into the libcuda.so.1 of LD_LIBRARY_PATH='%s', %ld calls per thread, %ld ns "
      "of work between calls\n",
      ndt::bench::LibraryPath().c_str(), calls, gap_ns);
  std::printf("%-8s %7s %10s %10s %10s %10s %10s %10s\n", "case", "threads", "plain p50",
              "plain p99", "traced p50", "traced p99", "over p50", "over p99");
  for (const std::string& which : cases) {
    for (const int t : threads) {
      const Result plain = Measure(argv[0], which, t, calls, gap_ns, false);
      const Result traced = Measure(argv[0], which, t, calls, gap_ns, true);
      std::printf("%-8s %7d %10ld %10ld %10ld %10ld %10ld %10ld\n", which.c_str(), t,
                  plain.median, plain.p99, traced.median, traced.p99,
                  traced.median - plain.median, traced.p99 - plain.p99);
    }
  }
  std::printf(
      "(ns per call; memset = cuMemsetD8_v2 of 16 bytes, launch = cuLaunchKernel of VectorAdd "
      "with 3 pointer arguments, stream = the same on the thread's own stream, model = the same "
      "launch of 64 kernel handles in turn on tensors in 8 allocator segments; targets: overhead "
      "median <= 150 ns, p99 <= 1000 ns)\n");
  return 0;
}
