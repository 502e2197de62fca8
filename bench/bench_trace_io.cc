// Writer and reader throughput on a synthetic training-like stream, against baselines
// measured in the same run: plain zstd (the writer's level, in blocks of the writer's chunk
// size, on one thread) over the same serialised bytes, and memcpy. Prints ratios and the DESIGN.md
// targets beside them.
//
// An Append's wall time includes the time its thread was preempted, which on a machine with
// fewer cores than threads is milliseconds whatever the writer does. So one more run with
// policy drop ("probe") brackets every Append with getrusage(RUSAGE_THREAD): an Append during
// which its thread slept in the kernel (a voluntary context switch: it waited for a lock, a
// condition variable, I/O) blocked; its longest Append with no context switch at all is the
// writer's own latency. But interrupts and the hypervisor stretch any short call on a busy
// machine without a context switch (tens of microseconds on the 2-core build VM), so after
// every Append the probe brackets a control the same way: the same record encoded into a
// buffer of the thread's own, no writer involved. Unswitched Appends over 50 us beyond the
// control's count are the writer's. The probe's syscalls slow its appending threads: read its
// records/s as the probe's, not the writer's.
//
// Usage: bench_trace_io [--quick] [--level N]   (N: the writer's zstd level, default the
//        writer's own; the baseline compresses at the same level)
#include <sys/resource.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "formats/record_codec.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "formats/writer_summary.h"
#include "tools/synthetic_trace.h"

namespace {

using namespace ndt;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string TempTrace(const char* name) {
  const std::filesystem::path dir =
      std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  return (dir / name).string();
}

// The records of a synthetic training loop, in memory.
std::vector<format::Record> SyntheticRecords(uint64_t steps) {
  const std::string path = TempTrace("ndt_bench_source.ndt");
  tools::SyntheticOptions options;
  options.steps = steps;
  auto writer = format::TraceWriter::Create(path, tools::SyntheticHeader(options));
  if (!writer.ok() || !tools::WriteSyntheticTrace(**writer, options).ok() ||
      !(*writer)->Close().ok()) {
    std::fprintf(stderr, "error: cannot write the synthetic trace\n");
    std::exit(3);
  }
  auto reader = format::TraceReader::Open(path);
  std::vector<format::Record> records;
  format::Record record;
  while ((*reader)->Next(&record)) records.push_back(record);
  std::filesystem::remove(path);
  return records;
}

struct Baseline {
  double zstd_gbps = 0;
  double memcpy_gbps = 0;
  double zstd_bytes_per_record = 0;
};

// The zstd level of the writer and of the baseline (--level).
int g_level = format::WriterOptions{}.compression_level;

Baseline MeasureBaseline(const std::vector<format::Record>& records) {
  std::string frames;
  for (const auto& record : records) format::codec::AppendRecord(record, &frames);
  Baseline baseline;
  const size_t block = format::WriterOptions{}.chunk_bytes;
  std::string out(ZSTD_compressBound(block), '\0');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, g_level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);  // as the writer
  size_t compressed = 0;
  const auto start = Clock::now();
  for (size_t at = 0; at < frames.size(); at += block) {
    const size_t n = std::min(block, frames.size() - at);
    compressed += ZSTD_compress2(cctx, out.data(), out.size(), frames.data() + at, n);
  }
  baseline.zstd_gbps = frames.size() / Seconds(Clock::now() - start) / 1e9;
  baseline.zstd_bytes_per_record = double(compressed) / records.size();
  ZSTD_freeCCtx(cctx);
  std::string copy(frames.size(), '\0');
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t = Clock::now();
    std::memcpy(copy.data(), frames.data(), frames.size());
    best = std::min(best, Seconds(Clock::now() - t));
  }
  baseline.memcpy_gbps = frames.size() / best / 1e9;
  return baseline;
}

struct WriterRun {
  double seconds = 0;
  format::WriterStats stats;
  uint64_t ops = 0;
  std::vector<uint64_t> append_ns;  // every Append's duration, all threads
  // probe: Appends during which the thread slept (voluntary switch), was preempted
  // (involuntary only), and the longest Append with no switch at all; the same for the
  // control bracket (the record encoded into a buffer of the thread's own, no writer).
  uint64_t blocked_appends = 0;
  uint64_t preempted_appends = 0;
  uint64_t max_unswitched_ns = 0;
  uint64_t max_blocked_ns = 0;
  uint64_t over_50us = 0;  // unswitched Appends longer than 50 us
  uint64_t control_blocked = 0;
  uint64_t control_max_unswitched_ns = 0;
  uint64_t control_over_50us = 0;
};

struct Switches {
  long voluntary = 0;
  long involuntary = 0;
};

Switches ThreadSwitches() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return {usage.ru_nvcsw, usage.ru_nivcsw};
}

// One call's wall time and whether its thread slept in the kernel or was preempted meanwhile.
struct Bracket {
  uint64_t ns = 0;
  bool slept = false;
  bool preempted = false;
};

template <typename Call>
Bracket Bracketed(const Call& call) {
  const Switches before = ThreadSwitches();
  const auto start = Clock::now();
  call();
  const uint64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  const Switches after = ThreadSwitches();
  return {ns, after.voluntary != before.voluntary, after.involuntary != before.involuntary};
}

WriterRun RunWriter(const std::vector<format::Record>& records, int threads, int rounds,
                    format::FullPolicy policy, const std::string& path, bool probe = false) {
  format::WriterOptions options;
  options.when_full = policy;
  options.compression_level = g_level;
  auto writer = format::TraceWriter::Create(path, tools::SyntheticHeader({}), options);
  if (!writer.ok()) {
    std::fprintf(stderr, "error: %s\n", writer.status().message().c_str());
    std::exit(3);
  }
  std::vector<std::vector<uint64_t>> latencies(threads);
  std::vector<WriterRun> probes(threads);
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto& mine = latencies[t];
      WriterRun& probed = probes[t];
      mine.reserve(records.size() * rounds);
      std::string control;  // the control bracket's buffer
      control.reserve(2 * format::WriterOptions{}.chunk_bytes);
      for (int round = 0; round < rounds; ++round) {
        for (const auto& record : records) {
          if (!probe) {
            const auto before = Clock::now();
            (*writer)->Append(record);
            mine.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               Clock::now() - before).count());
            continue;
          }
          const Bracket append = Bracketed([&] { (*writer)->Append(record); });
          mine.push_back(append.ns);
          if (append.slept) {
            ++probed.blocked_appends;
            probed.max_blocked_ns = std::max(probed.max_blocked_ns, append.ns);
          } else if (append.preempted) {
            ++probed.preempted_appends;
          } else {
            probed.max_unswitched_ns = std::max(probed.max_unswitched_ns, append.ns);
            probed.over_50us += append.ns > 50'000 ? 1 : 0;
          }
          if (control.size() >= format::WriterOptions{}.chunk_bytes) control.clear();
          const Bracket own = Bracketed([&] { format::codec::AppendRecord(record, &control); });
          if (own.slept) {
            ++probed.control_blocked;
          } else if (!own.preempted) {
            probed.control_max_unswitched_ns =
                std::max(probed.control_max_unswitched_ns, own.ns);
            probed.control_over_50us += own.ns > 50'000 ? 1 : 0;
          }
        }
      }
    });
  }
  for (auto& worker : workers) worker.join();
  const Status closed = (*writer)->Close();
  WriterRun run;
  run.seconds = Seconds(Clock::now() - start);
  if (!closed.ok()) std::fprintf(stderr, "error: %s\n", closed.message().c_str());
  run.stats = (*writer)->stats();
  for (const auto& record : records) {
    run.ops += std::holds_alternative<format::OpRecord>(record) ? 1 : 0;
  }
  run.ops *= static_cast<uint64_t>(threads) * rounds;
  for (auto& mine : latencies) run.append_ns.insert(run.append_ns.end(), mine.begin(), mine.end());
  for (const WriterRun& probed : probes) {
    run.blocked_appends += probed.blocked_appends;
    run.preempted_appends += probed.preempted_appends;
    run.max_unswitched_ns = std::max(run.max_unswitched_ns, probed.max_unswitched_ns);
    run.max_blocked_ns = std::max(run.max_blocked_ns, probed.max_blocked_ns);
    run.over_50us += probed.over_50us;
    run.control_blocked += probed.control_blocked;
    run.control_max_unswitched_ns =
        std::max(run.control_max_unswitched_ns, probed.control_max_unswitched_ns);
    run.control_over_50us += probed.control_over_50us;
  }
  std::sort(run.append_ns.begin(), run.append_ns.end());
  return run;
}

uint64_t Percentile(const std::vector<uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, size_t(p * sorted.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--level") == 0 && i + 1 < argc) {
      g_level = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_trace_io [--quick] [--level N]\n");
      return 2;
    }
  }
  const auto records = SyntheticRecords(quick ? 20 : 100);
  const int rounds = quick ? 2 : 10;
  const Baseline baseline = MeasureBaseline(records);
  std::printf("synthetic training stream: %zu records per round, %d rounds per thread\n",
              records.size(), rounds);
  std::printf("baseline: plain zstd at the writer's level (%d) over the same bytes on one thread "
              "%.2f GB/s (%.1f B/record), memcpy %.2f GB/s\n",
              g_level, baseline.zstd_gbps,
              baseline.zstd_bytes_per_record, baseline.memcpy_gbps);
  std::printf("writer: %d compressor threads, %zu KiB chunks\n\n",
              format::WriterOptions{}.compressor_threads, format::WriterOptions{}.chunk_bytes >> 10);

  std::printf("%-7s %-6s %10s %9s %10s %9s %8s %8s %9s %9s\n", "threads", "policy", "records/s",
              "GB/s", "x zstd", "B/op", "p50 ns", "p99 ns", "max us", "dropped");
  const std::string path = TempTrace("ndt_bench_writer.ndt");
  std::string last_trace;
  for (const auto& [threads, policy] :
       std::vector<std::pair<int, format::FullPolicy>>{{1, format::FullPolicy::kStall},
                                                       {2, format::FullPolicy::kStall},
                                                       {3, format::FullPolicy::kStall},
                                                       {3, format::FullPolicy::kDrop}}) {
    const WriterRun run = RunWriter(records, threads, rounds, policy, path);
    const double gbps = run.stats.uncompressed_bytes / run.seconds / 1e9;
    std::printf("%-7d %-6s %10.3g %9.2f %10.2f %9.1f %8llu %8llu %9.1f %9llu\n", threads,
                policy == format::FullPolicy::kStall ? "stall" : "drop",
                run.stats.records_appended / run.seconds, gbps, gbps / baseline.zstd_gbps,
                double(run.stats.file_bytes) / run.ops,
                static_cast<unsigned long long>(Percentile(run.append_ns, 0.5)),
                static_cast<unsigned long long>(Percentile(run.append_ns, 0.99)),
                run.append_ns.empty() ? 0.0 : run.append_ns.back() / 1e3,
                static_cast<unsigned long long>(run.stats.records_dropped));
    if (threads == 1) {
      last_trace = TempTrace("ndt_bench_reader.ndt");
      std::filesystem::copy_file(path, last_trace,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  // The probe: which Appends blocked (slept in the kernel) and how long the others took.
  {
    const WriterRun run = RunWriter(records, 3, rounds, format::FullPolicy::kDrop, path, true);
    std::printf("%-7d %-6s %10.3g %9s %10s %9s %8llu %8llu %9.1f %9llu\n", 3, "probe",
                run.stats.records_appended / run.seconds, "-", "-", "-",
                static_cast<unsigned long long>(Percentile(run.append_ns, 0.5)),
                static_cast<unsigned long long>(Percentile(run.append_ns, 0.99)),
                run.append_ns.empty() ? 0.0 : run.append_ns.back() / 1e3,
                static_cast<unsigned long long>(run.stats.records_dropped));
    std::printf("probe (3 threads, drop): %zu Appends; %llu blocked (slept in the kernel), "
                "longest %.1f us; %llu preempted; longest Append with no context switch "
                "%.1f us\n",
                run.append_ns.size(), static_cast<unsigned long long>(run.blocked_appends),
                run.max_blocked_ns / 1e3, static_cast<unsigned long long>(run.preempted_appends),
                run.max_unswitched_ns / 1e3);
    std::printf("control (the same record encoded into a buffer of the thread's own, after each "
                "Append): %llu blocked; longest with no context switch %.1f us\n",
                static_cast<unsigned long long>(run.control_blocked),
                run.control_max_unswitched_ns / 1e3);
    std::printf("unswitched calls over 50 us: %llu Appends, %llu controls\n",
                static_cast<unsigned long long>(run.over_50us),
                static_cast<unsigned long long>(run.control_over_50us));
    // What the machine does to any short call (interrupts, the hypervisor) shows in the
    // control; the writer's own part is what Append takes beyond it.
    const bool met = run.blocked_appends == 0 &&
                     (run.max_unswitched_ns <= 50'000 || run.over_50us <= run.control_over_50us);
    std::printf("drop-policy Append target (blocked 0; longest unswitched <= 50 us, or no more "
                "unswitched Appends over 50 us than controls): %s\n", met ? "met" : "NOT met");
  }
  std::printf("targets: >= 1 GB/s uncompressed on <= 3 threads; <= 64 B/op compressed; "
              "an appending thread never blocked > 50 us (policy drop: probe's blocked 0, "
              "longest unswitched <= 50 us, or no more over 50 us than the control)\n\n");

  // Reader: records/s and uncompressed GB/s against plain zstd decompression of the chunks.
  auto reader = format::TraceReader::Open(last_trace);
  if (!reader.ok()) {
    std::fprintf(stderr, "error: %s\n", reader.status().message().c_str());
    return 3;
  }
  uint64_t uncompressed = 0;
  for (const auto& chunk : (*reader)->chunks()) uncompressed += chunk.uncompressed_size;
  double best_read = 1e9;
  uint64_t read_records = 0;
  for (int i = 0; i < 3; ++i) {
    (*reader)->Rewind();
    format::Record record;
    read_records = 0;
    const auto start = Clock::now();
    while ((*reader)->Next(&record)) ++read_records;
    best_read = std::min(best_read, Seconds(Clock::now() - start));
  }
  // Baseline: decompress the same chunk payloads from memory with plain zstd.
  FILE* file = std::fopen(last_trace.c_str(), "rb");
  std::string bytes((*reader)->file_bytes(), '\0');
  if (file == nullptr || std::fread(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
    std::fprintf(stderr, "error: cannot read %s\n", last_trace.c_str());
    return 3;
  }
  std::fclose(file);
  std::string out(16 << 20, '\0');
  const auto start = Clock::now();
  for (const auto& chunk : (*reader)->chunks()) {
    ZSTD_decompress(out.data(), out.size(), bytes.data() + chunk.offset + 56,
                    chunk.compressed_size);
  }
  const double zstd_read = Seconds(Clock::now() - start);
  const double read_gbps = uncompressed / best_read / 1e9;
  const double zstd_gbps = uncompressed / zstd_read / 1e9;
  std::printf("reader: %llu records, %.3g records/s, %.2f GB/s uncompressed; plain zstd "
              "decompression %.2f GB/s; ratio %.2f\n",
              static_cast<unsigned long long>(read_records), read_records / best_read, read_gbps,
              zstd_gbps, read_gbps / zstd_gbps);
  std::printf("target: reader >= 1 GB/s uncompressed per core\n");

  // record's closing line: the writer's summary alone (ReadWriterSummary) against reading the
  // trace (what record did before traces kept a summary), best of 3 each.
  double best_summary = 1e9;
  uint64_t summary_records = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    auto summary = format::ReadWriterSummary(last_trace);
    best_summary = std::min(best_summary, Seconds(Clock::now() - t));
    if (!summary.ok() || !summary->has_value()) {
      std::fprintf(stderr, "error: the trace has no writer summary\n");
      return 3;
    }
    summary_records = (*summary)->records;
  }
  std::printf("summary: %llu records from the writer summary in %.1f us; reading them %.1f us "
              "(%.0fx)\n",
              static_cast<unsigned long long>(summary_records), best_summary * 1e6,
              best_read * 1e6, best_read / best_summary);
  std::filesystem::remove(path);
  std::filesystem::remove(last_trace);
  return 0;
}
