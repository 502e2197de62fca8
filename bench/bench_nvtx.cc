// The cost of an NVTX range push + pop with libndtrace.so as the NVTX injection library,
// against the same calls with no injection (NVTX's own empty call: a null function pointer
// check), each in its own process, in the same run. A third process records a trace and
// issues one driver op inside each range (cuMemsetD8 on the stand-in), against the op alone:
// the cost of the push and pop records written around an op.
//
// Prints ns per push+pop pair: the median over batches of kBatch pairs (one clock reading per
// batch, so the clock's own cost is spread), and p99 of the same batches.
//
// Usage: bench_nvtx [BATCHES]              (default 20000)
//        bench_nvtx --child MODE BATCHES   (internal: the measured process)
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>

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

constexpr int kBatch = 64;

struct Result {
  double median = 0;
  double p99 = 0;
};

Result Summarize(std::vector<double>& per_pair) {
  std::sort(per_pair.begin(), per_pair.end());
  return {per_pair[per_pair.size() / 2], per_pair[per_pair.size() * 99 / 100]};
}

// Push/pop pairs with no op inside (mode "ranges"), nested one deep inside an outer range as
// annotated code usually is.
int ChildRanges(long batches) {
  nvtxRangePushA("outer");
  std::vector<double> per_pair(batches);
  for (long b = 0; b < batches; ++b) {
    const auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      nvtxRangePushA("aten::add_, seq = 12");
      nvtxRangePop();
    }
    per_pair[b] = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kBatch;
  }
  nvtxRangePop();
  const Result result = Summarize(per_pair);
  std::printf("%.2f %.2f\n", result.median, result.p99);
  return 0;
}

// One cuMemsetD8 per iteration, inside a fresh range (mode "op_in_range") or not ("op").
int ChildOps(long batches, bool ranges) {
  const auto [memset, buffer] = ndt::bench::SetUpMemset();
  std::vector<double> per_op(batches);
  for (long b = 0; b < batches; ++b) {
    const auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      if (ranges) nvtxRangePushA("aten::fill_, seq = 7");
      memset(buffer, static_cast<unsigned char>(i), 16);
      if (ranges) nvtxRangePop();
    }
    per_op[b] = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kBatch;
  }
  const Result result = Summarize(per_op);
  std::printf("%.2f %.2f\n", result.median, result.p99);
  return 0;
}

Result Measure(const std::string& self, const std::string& mode, long batches, bool injected) {
  std::string command = "LD_LIBRARY_PATH='" + ndt::bench::LibraryPath() + "' ";
  command += "NVTX_INJECTION64_PATH= ";
  if (injected) {
    const std::string tracer = ndt::bench::TracerPath();
    command += "LD_PRELOAD='" + tracer + "' NVTX_INJECTION64_PATH='" + tracer +
               "' NDTRACE_OUTPUT=/tmp/ndt_bench_nvtx.ndt NDTRACE_QUIET=1 "
               "NDTRACE_DIGEST_EXIT=0 ";
  }
  command += "'" + self + "' --child " + mode + " " + std::to_string(batches);
  FILE* pipe = popen(command.c_str(), "r");
  Result result;
  if (pipe == nullptr || std::fscanf(pipe, "%lf %lf", &result.median, &result.p99) != 2) {
    std::fprintf(stderr, "error: the measured process failed: %s\n", command.c_str());
    std::exit(3);
  }
  pclose(pipe);
  std::remove("/tmp/ndt_bench_nvtx.ndt");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) {
    const long batches = std::atol(argv[3]);
    if (batches <= 0) return 2;
    if (std::strcmp(argv[2], "ranges") == 0) return ChildRanges(batches);
    if (std::strcmp(argv[2], "op") == 0) return ChildOps(batches, false);
    if (std::strcmp(argv[2], "op_in_range") == 0) return ChildOps(batches, true);
    return 2;
  }
  const long batches = argc > 1 ? std::atol(argv[1]) : 20000;
  if (batches <= 0) {
    std::fprintf(stderr, "usage: bench_nvtx [BATCHES]\n");
    return 2;
  }
  const Result empty = Measure(argv[0], "ranges", batches, false);
  const Result injected = Measure(argv[0], "ranges", batches, true);
  const Result op = Measure(argv[0], "op", batches / 4, true);
  const Result op_in_range = Measure(argv[0], "op_in_range", batches / 4, true);
  std::printf("NVTX range push+pop, %ld batches of %d pairs per process\n", batches, kBatch);
  std::printf("%-40s %10s %10s\n", "", "median ns", "p99 ns");
  std::printf("%-40s %10.1f %10.1f\n", "no injection (NVTX's empty call)", empty.median, empty.p99);
  std::printf("%-40s %10.1f %10.1f\n", "libndtrace.so injected", injected.median, injected.p99);
  std::printf("%-40s %10.1f %10.1f\n", "overhead per push+pop", injected.median - empty.median,
              injected.p99 - empty.p99);
  std::printf("target: overhead median <= 100 ns\n\n");
  std::printf("recording, one cuMemsetD8 op per iteration (LD_LIBRARY_PATH='%s')\n",
              ndt::bench::LibraryPath().c_str());
  std::printf("%-40s %10.1f %10.1f\n", "op alone", op.median, op.p99);
  std::printf("%-40s %10.1f %10.1f\n", "op inside its own range", op_in_range.median,
              op_in_range.p99);
  std::printf("%-40s %10.1f %10.1f\n", "range records around an op", op_in_range.median - op.median,
              op_in_range.p99 - op.p99);
  return 0;
}
