// ndtrace diff throughput and memory on synthetic traces of growing length, against reading
// one trace alone measured in the same run. Each measurement runs in a child process so its
// peak RSS is its own: memory must stay flat as traces grow.
//
// Pairs: identical runs, runs whose every digest differs, a run against a copy of itself cut in
// the middle (a killed run), and a run against a closed run a tenth as long.
//
// Wall time and CPU time (all threads: diff's readers load chunks ahead on threads of their
// own) are both printed: GB/s of wall time is what a user waits, GB per CPU second the cost.
//
// Usage: bench_diff [--full | --ops N[,N...]]   (10^5 and 10^6 ops; --full adds 10^7)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  double cpu_seconds = 0;  // user + system, every thread of the child
  long peak_rss_kib = 0;
};

// Runs `body` in a child process; returns its wall time, CPU time and peak RSS.
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
  m.cpu_seconds = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                  usage.ru_stime.tv_usec / 1e6;
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

void WriteTrace(const std::string& path, uint64_t ops, uint64_t seed = 1) {
  tools::SyntheticOptions options;
  options.steps = 1;
  options.seed = seed;
  const uint64_t per_step = tools::SyntheticOpCount(options);
  options.steps = (ops + per_step - 1) / per_step;
  // Every record written, however loaded the machine (the drop policy would make the
  // "identical" pair differ where the writer fell behind).
  format::WriterOptions writer_options;
  writer_options.when_full = format::FullPolicy::kStall;
  auto writer =
      format::TraceWriter::Create(path, tools::SyntheticHeader(options), writer_options);
  if (!writer.ok() || !tools::WriteSyntheticTrace(**writer, options).ok() ||
      !(*writer)->Close().ok()) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    std::exit(3);
  }
}

// The second trace of each measured pair, beside the first (`a`, of `ops` ops).
struct Pair {
  const char* name;
  std::function<void(const std::string& a, const std::string& b, uint64_t ops)> make;
  bool identical;
};

const Pair kPairs[] = {
    {"identical",
     [](const std::string&, const std::string& b, uint64_t ops) { WriteTrace(b, ops); }, true},
    // Every digest differs: every aligned pair diverges.
    {"diverging",
     [](const std::string&, const std::string& b, uint64_t ops) { WriteTrace(b, ops, 2); }, false},
    // A copy of A cut in the middle, as a killed run leaves it: half of A's ops have no partner.
    {"truncated",
     [](const std::string& a, const std::string& b, uint64_t) {
       std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
       std::filesystem::resize_file(b, std::filesystem::file_size(a) / 2);
     },
     false},
    // A closed trace of a tenth of A's length.
    {"shorter",
     [](const std::string&, const std::string& b, uint64_t ops) { WriteTrace(b, ops / 10); },
     false},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {100'000, 1'000'000};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) {
      sizes.push_back(10'000'000);
    } else if (std::strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
      sizes.clear();
      const std::string list = argv[++i];
      for (size_t start = 0; start < list.size();) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const uint64_t n = std::strtoull(list.substr(start, comma - start).c_str(), nullptr, 10);
        if (n < 10) {
          std::fprintf(stderr, "error: --ops: each size must be a number of at least 10\n");
          return 2;
        }
        sizes.push_back(n);
        start = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_diff [--full | --ops N[,N...]]\n");
      return 2;
    }
  }
  if (sizes.empty()) {
    std::fprintf(stderr, "usage: bench_diff [--full | --ops N[,N...]]\n");
    return 2;
  }
  const std::filesystem::path dir =
      std::filesystem::is_directory("/dev/shm") && sizes.back() < 10'000'000 ? "/dev/shm" : "/tmp";
  std::printf("%-10s %-10s %10s %12s %11s %11s %7s %11s %12s %12s\n", "ops", "pair", "file MB",
              "records MB", "read GB/s", "diff GB/s", "ratio", "diff GB/cs", "read RSS MB",
              "diff RSS MB");
  for (uint64_t ops : sizes) {
    const std::string a = (dir / "ndt_bench_diff_a.ndt").string();
    const std::string b = (dir / "ndt_bench_diff_b.ndt").string();
    // Traces are written by child processes too: the writer's buffers would otherwise stay in
    // this process, and every later child would start with them.
    InChild([&] {
      WriteTrace(a, ops);
      return true;
    });
    const uint64_t bytes = UncompressedBytes(a);
    const Measured read = InChild([&] {
      auto reader = format::TraceReader::Open(a);
      format::Record record;
      uint64_t n = 0;
      while ((*reader)->Next(&record)) ++n;
      return n > 0;
    });
    for (const Pair& pair : kPairs) {
      InChild([&] {
        pair.make(a, b, ops);
        return true;
      });
      const uint64_t bytes_b = UncompressedBytes(b);
      const Measured diff = InChild([&] {
        auto report = replay::DiffTraces(a, b);
        if (!report.ok()) return false;
        return pair.identical ? report->identical() && report->ops_compared >= ops
                              : !report->identical();
      });
      const double read_gbps = bytes / read.seconds / 1e9;
      const double diff_gbps = (bytes + bytes_b) / diff.seconds / 1e9;  // both are read
      const double diff_per_cpu = (bytes + bytes_b) / diff.cpu_seconds / 1e9;
      std::printf("%-10llu %-10s %10.1f %12.1f %11.2f %11.2f %7.2f %11.2f %12.1f %12.1f\n",
                  static_cast<unsigned long long>(ops), pair.name,
                  std::filesystem::file_size(a) / 1e6, bytes / 1e6, read_gbps, diff_gbps,
                  diff_gbps / read_gbps, diff_per_cpu, read.peak_rss_kib / 1024.0,
                  diff.peak_rss_kib / 1024.0);
      std::fflush(stdout);
      std::filesystem::remove(b);
    }
    std::filesystem::remove(a);
  }
  std::printf("diff GB/s counts the records of both traces, per second of wall time (diff reads "
              "each trace ahead on a thread of its own); diff GB/cs the same per CPU second, "
              "all threads (the per-core figure); ratio = diff / reading trace A alone (one "
              "thread). Targets: >= 1 GB/s per core; diff RSS independent of trace length, "
              "<= 64 MiB at 10^7 ops, for every pair.\n");
  return 0;
}
