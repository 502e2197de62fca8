// Host overhead of an intercepted driver call: the same calls into the stand-in driver
// (tests/standin/), or a real one (bench_paths.h), once plain and once with libndtrace.so
// preloaded and recording, each in its own process, in the same run. Prints ns per call
// (median, p99) and the ratio.
//
// The call is cuMemsetD8_v2 on a 16-byte allocation: cheap on the stand-in, and recorded as
// one op (no digests), so the difference is the hook plus the record's append.
//
// Usage: bench_hooks [CALLS]        (default 200000)
//        bench_hooks --child CALLS  (internal: the measured process)
#include <cuda.h>

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

// Reaches the driver the way cudart does (dlopen + cuGetProcAddress_v2), times `calls`
// memsets one by one and prints "median_ns p99_ns".
int Child(long calls) {
  const auto [memset, buffer] = ndt::bench::SetUpMemset();
  std::vector<long> ns(calls);
  for (long i = 0; i < calls; ++i) {
    const auto start = Clock::now();
    memset(buffer, static_cast<unsigned char>(i), 16);
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }
  std::sort(ns.begin(), ns.end());
  std::printf("%ld %ld\n", ns[calls / 2], ns[calls * 99 / 100]);
  return 0;
}

struct Result {
  long median = 0;
  long p99 = 0;
};

Result Measure(const std::string& self, long calls, bool traced) {
  std::string command = "LD_LIBRARY_PATH='" + ndt::bench::LibraryPath() + "' ";
  if (traced) {
    command += "LD_PRELOAD='" + ndt::bench::TracerPath() +
               "' NDTRACE_OUTPUT=/tmp/ndt_bench_hooks.ndt "
               "NDTRACE_QUIET=1 NDTRACE_DIGEST_EXIT=0 ";
  }
  command += "'" + self + "' --child " + std::to_string(calls);
  FILE* pipe = popen(command.c_str(), "r");
  Result result;
  if (pipe == nullptr || std::fscanf(pipe, "%ld %ld", &result.median, &result.p99) != 2) {
    std::fprintf(stderr, "error: the measured process failed: %s\n", command.c_str());
    std::exit(3);
  }
  pclose(pipe);
  std::remove("/tmp/ndt_bench_hooks.ndt");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return Child(std::atol(argv[2]));
  const long calls = argc > 1 ? std::atol(argv[1]) : 200000;
  const Result plain = Measure(argv[0], calls, false);
  const Result traced = Measure(argv[0], calls, true);
  std::printf(
      "cuMemsetD8_v2 into the libcuda.so.1 of LD_LIBRARY_PATH='%s', %ld calls per process\n",
      ndt::bench::LibraryPath().c_str(), calls);
  std::printf("%-22s %10s %10s\n", "", "median ns", "p99 ns");
  std::printf("%-22s %10ld %10ld\n", "plain", plain.median, plain.p99);
  std::printf("%-22s %10ld %10ld\n", "hooked and recorded", traced.median, traced.p99);
  std::printf("%-22s %10ld %10ld\n", "overhead", traced.median - plain.median,
              traced.p99 - plain.p99);
  std::printf("ratio (median) %.2f; targets: overhead median <= 150 ns, p99 <= 1000 ns\n",
              static_cast<double>(traced.median) / std::max(1L, plain.median));
  return 0;
}
