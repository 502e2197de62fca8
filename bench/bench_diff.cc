// ndtrace diff throughput and memory on synthetic traces of growing length, against reading
// one trace alone measured in the same run. Each measurement runs in a child process so its
// peak RSS is its own: memory must stay flat as traces grow.
//
// Usage: bench_diff [--full]   (10^5 and 10^6 ops; --full adds 10^7)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "replayer/trace_diff.h"
#include "tools/synthetic_trace.h"

namespace {

using namespace ndt;
using Clock = std::chrono::steady_clock;

struct Measured {
  double seconds = 0;
  long peak_rss_kib = 0;
};

// Runs `body` in a child process; returns its wall time and peak RSS.
Measured InChild(const std::function<bool()>& body) {
  const auto start = Clock::now();
  const pid_t child = fork();
  if (child == 0) _exit(body() ? 0 : 1);
  int status = 0;
  rusage usage{};
  wait4(child, &status, 0, &usage);
  Measured m;
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  m.peak_rss_kib = usage.ru_maxrss;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "error: a measured child failed\n");
    std::exit(3);
  }
  return m;
}

uint64_t UncompressedBytes(const std::string& path) {
  auto reader = format::TraceReader::Open(path);
  uint64_t bytes = 0;
  for (const auto& chunk : (*reader)->chunks()) bytes += chunk.uncompressed_size;
  return bytes;
}

void WriteTrace(const std::string& path, uint64_t ops) {
  tools::SyntheticOptions options;
  options.steps = 1;
  const uint64_t per_step = tools::SyntheticOpCount(options);
  options.steps = (ops + per_step - 1) / per_step;
  auto writer = format::TraceWriter::Create(path, tools::SyntheticHeader(options));
  if (!writer.ok() || !tools::WriteSyntheticTrace(**writer, options).ok() ||
      !(*writer)->Close().ok()) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    std::exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {100'000, 1'000'000};
  if (argc > 1 && std::strcmp(argv[1], "--full") == 0) sizes.push_back(10'000'000);
  const std::filesystem::path dir =
      std::filesystem::is_directory("/dev/shm") && sizes.back() < 10'000'000 ? "/dev/shm" : "/tmp";
  std::printf("%-10s %10s %12s %11s %11s %7s %12s %12s\n", "ops", "file MB", "records MB",
              "read GB/s", "diff GB/s", "ratio", "read RSS MB", "diff RSS MB");
  for (uint64_t ops : sizes) {
    const std::string a = (dir / "ndt_bench_diff_a.ndt").string();
    const std::string b = (dir / "ndt_bench_diff_b.ndt").string();
    WriteTrace(a, ops);
    WriteTrace(b, ops);
    const uint64_t bytes = UncompressedBytes(a);
    const Measured read = InChild([&] {
      auto reader = format::TraceReader::Open(a);
      format::Record record;
      uint64_t n = 0;
      while ((*reader)->Next(&record)) ++n;
      return n > 0;
    });
    const Measured diff = InChild([&] {
      auto report = replay::DiffTraces(a, b);
      return report.ok() && report->identical() && report->ops_compared >= ops;
    });
    const double read_gbps = bytes / read.seconds / 1e9;
    const double diff_gbps = 2.0 * bytes / diff.seconds / 1e9;  // both traces are read
    std::printf("%-10llu %10.1f %12.1f %11.2f %11.2f %7.2f %12.1f %12.1f\n",
                static_cast<unsigned long long>(ops),
                std::filesystem::file_size(a) / 1e6, bytes / 1e6, read_gbps, diff_gbps,
                diff_gbps / read_gbps, read.peak_rss_kib / 1024.0, diff.peak_rss_kib / 1024.0);
    std::filesystem::remove(a);
    std::filesystem::remove(b);
  }
  std::printf("diff GB/s counts the records of both traces; ratio = diff / reading one trace "
              "alone. Targets: >= 1 GB/s per core, memory independent of trace length.\n");
  return 0;
}
