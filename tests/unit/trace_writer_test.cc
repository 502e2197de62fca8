// TraceWriter: round trips, concurrency, the full-buffer policies, failures and blobs.
#include <signal.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <chrono>
#include <map>
#include <optional>
#include <numeric>
#include <random>
#include <thread>
#include <variant>

#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "formats/writer_summary.h"
#include "support/sample_records.h"

namespace ndt::format {
namespace {

using testing::EveryRecordType;
using testing::ReadAll;
using testing::SampleHeader;
using testing::SampleOp;
using testing::TempPath;

std::unique_ptr<TraceWriter> MustCreate(const std::string& path, WriterOptions options = {}) {
  auto writer = TraceWriter::Create(path, SampleHeader(), options);
  REQUIRE(writer.ok());
  return std::move(writer).value();
}

std::unique_ptr<TraceReader> MustOpen(const std::string& path) {
  auto reader = TraceReader::Open(path);
  INFO(reader.status().message());
  REQUIRE(reader.ok());
  return std::move(reader).value();
}

TEST_CASE("every record type and the header survive a write/read round trip", "[formats]") {
  TempPath path("roundtrip.ndt");
  auto writer = MustCreate(path.str());
  const std::vector<Record> records = EveryRecordType();
  for (const Record& record : records) REQUIRE(writer->Append(record));
  REQUIRE(writer->Close().ok());

  auto reader = MustOpen(path.str());
  TraceHeader expected_header = SampleHeader();
  expected_header.format_version = kFormatVersion;
  CHECK(reader->header() == expected_header);
  CHECK(reader->complete());
  CHECK(reader->truncated_tail_bytes() == 0);
  CHECK(ReadAll(*reader) == records);
  CHECK(reader->damage().empty());
}

TEST_CASE("records of 8 concurrently appending threads all arrive, each thread's in order",
          "[formats]") {
  TempPath path("threads.ndt");
  WriterOptions options;
  options.chunk_bytes = 8 << 10;
  options.when_full = FullPolicy::kStall;  // this test counts every record
  auto writer = MustCreate(path.str(), options);
  constexpr int kThreads = 8;
  constexpr uint64_t kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        writer->Append(SampleOp(t * kPerThread + i, static_cast<uint32_t>(t)));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE(writer->Close().ok());
  CHECK(writer->stats().records_appended == kThreads * kPerThread);
  CHECK(writer->stats().records_dropped == 0);

  auto reader = MustOpen(path.str());
  std::map<uint32_t, uint64_t> next_of_thread;
  uint64_t total = 0;
  Record record;
  while (reader->Next(&record)) {
    const auto& op = std::get<OpRecord>(record);
    const uint64_t expected = next_of_thread.count(op.thread_id)
                                  ? next_of_thread[op.thread_id]
                                  : op.thread_id * kPerThread;
    REQUIRE(op.sequence == expected);
    REQUIRE(op == SampleOp(op.sequence, op.thread_id));
    next_of_thread[op.thread_id] = op.sequence + 1;
    ++total;
  }
  CHECK(total == kThreads * kPerThread);
  CHECK(next_of_thread.size() == kThreads);
  CHECK(reader->damage().empty());
}

TEST_CASE("records appended for one origin by several threads in turn keep their order",
          "[formats]") {
  // The tracer's held records: thread 1's ops are written partly by thread 1, partly by
  // whichever thread finds them ready, one after another.
  TempPath path("origin.ndt");
  WriterOptions options;
  options.chunk_bytes = 1 << 10;  // many chunks, from several buffers
  options.when_full = FullPolicy::kStall;
  auto writer = MustCreate(path.str(), options);
  constexpr uint64_t kOps = 6000;
  for (uint64_t i = 0; i < kOps; i += 100) {
    std::thread appender([&, i] {
      for (uint64_t j = i; j < i + 100; ++j) writer->Append(SampleOp(j, 1), uint64_t{1});
      // Records of this thread's own sequence interleave with the origin's in the file.
      writer->Append(SampleOp(kOps + i, 2));
    });
    appender.join();
  }
  REQUIRE(writer->Close().ok());
  auto reader = MustOpen(path.str());
  uint64_t next = 0;
  Record record;
  while (reader->Next(&record)) {
    const auto& op = std::get<OpRecord>(record);
    if (op.thread_id != 1) continue;
    REQUIRE(op.sequence == next);
    ++next;
  }
  CHECK(next == kOps);
}

// Appends from 4 threads faster than a slow compressor can write, with room for one chunk.
// Checks that the trace's DroppedRecords and its WriterSummary agree with the writer's stats.
WriterStats AppendUnderPressure(const std::string& path, FullPolicy policy, uint64_t* written) {
  WriterOptions options;
  options.chunk_bytes = 4 << 10;
  options.max_buffered_bytes = 4 << 10;
  options.compression_level = 19;
  options.when_full = policy;
  auto writer = MustCreate(path, options);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 3000; ++i) writer->Append(SampleOp(t * 3000 + i, t));
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE(writer->Close().ok());
  auto reader = MustOpen(path);
  *written = 0;
  uint64_t dropped_in_trace = 0;
  Record record;
  while (reader->Next(&record)) {
    if (auto* dropped = std::get_if<DroppedRecords>(&record)) {
      dropped_in_trace += dropped->records;
    } else {
      ++*written;
    }
  }
  const WriterStats stats = writer->stats();
  CHECK(dropped_in_trace == stats.records_dropped);
  // The summary in the trace says the same, the stall time included.
  const StatusOr<std::optional<WriterSummary>> summary = ReadWriterSummary(path);
  REQUIRE(summary.ok());
  REQUIRE(summary->has_value());
  CHECK((*summary)->dropped_records == stats.records_dropped);
  CHECK((*summary)->stall_ns == stats.stall_ns);
  CHECK(((*summary)->stalls > 0) == (stats.stall_ns > 0));
  CHECK((*summary)->ops == *written);
  return stats;
}

TEST_CASE("when buffers are full the drop policy drops whole chunks and counts them in the trace",
          "[formats]") {
  TempPath path("drop.ndt");
  uint64_t written = 0;
  const WriterStats stats = AppendUnderPressure(path.str(), FullPolicy::kDrop, &written);
  CHECK(stats.records_dropped > 0);
  CHECK(stats.stall_ns == 0);
  CHECK(written + stats.records_dropped == 4 * 3000);
}

TEST_CASE("when buffers are full the stall policy makes appenders wait and loses nothing",
          "[formats]") {
  TempPath path("stall.ndt");
  uint64_t written = 0;
  const WriterStats stats = AppendUnderPressure(path.str(), FullPolicy::kStall, &written);
  CHECK(stats.records_dropped == 0);
  CHECK(stats.stall_ns > 0);
  CHECK(written == 4 * 3000);
}

TEST_CASE("a closed trace carries the writer's summary, read without its records", "[formats]") {
  TempPath path("summary.ndt");
  auto writer = MustCreate(path.str());
  const std::vector<Record> every = EveryRecordType();
  std::map<size_t, uint64_t> by_type;
  std::map<size_t, uint64_t> by_kind;
  uint64_t records = 0;
  for (int round = 0; round < 3; ++round) {
    for (const Record& record : every) {
      REQUIRE(writer->Append(record));
      ++by_type[record.index()];
      if (const auto* op = std::get_if<OpRecord>(&record)) ++by_kind[static_cast<size_t>(op->kind)];
      ++records;
    }
  }
  for (uint64_t i = 0; i < 5000; ++i) {
    OpRecord op = SampleOp(100 + i, static_cast<uint32_t>(i % 3));
    op.kind = static_cast<OpKind>(i % kOpKindCount);
    REQUIRE(writer->Append(op, /*origin=*/i % 3));
    ++by_type[0];
    ++by_kind[i % kOpKindCount];
    ++records;
  }
  const std::vector<std::byte> blob(1000, std::byte{7});
  REQUIRE(writer->PutBlob(blob).ok());
  REQUIRE(writer->Close().ok());

  StatusOr<std::optional<WriterSummary>> quick = ReadWriterSummary(path.str());
  REQUIRE(quick.ok());
  REQUIRE(quick->has_value());
  const WriterSummary& summary = **quick;
  CHECK(summary.records == records);
  CHECK(summary.ops == by_type[0]);
  REQUIRE(summary.records_by_type.size() == std::variant_size_v<Record>);
  for (size_t i = 0; i < summary.records_by_type.size(); ++i) {
    INFO("record type " << i);
    CHECK(summary.records_by_type[i] == by_type[i]);
  }
  REQUIRE(summary.ops_by_kind.size() == kOpKindCount);
  for (size_t i = 0; i < summary.ops_by_kind.size(); ++i) {
    INFO("op kind " << i);
    CHECK(summary.ops_by_kind[i] == by_kind[i]);
  }
  CHECK(summary.blobs == 1);
  CHECK(summary.dropped_records == 0);
  CHECK(summary.stall_ns == 0);

  // The whole reader hides the summary's chunk, checks it, and reads what it counted.
  auto reader = MustOpen(path.str());
  CHECK(summary.chunks == reader->chunks().size());
  size_t blob_chunks = 0;
  for (const ChunkInfo& chunk : reader->chunks()) blob_chunks += chunk.kind == ChunkKind::kBlob;
  CHECK(blob_chunks == 1);
  CHECK(ReadAll(*reader).size() == records);
  CHECK(reader->damage().empty());
}

TEST_CASE("a trace that was not closed has no summary", "[formats]") {
  TempPath path("no-summary.ndt");
  TempPath copy("no-summary-copy.ndt");
  auto writer = MustCreate(path.str());
  for (uint64_t i = 0; i < 100; ++i) writer->Append(SampleOp(i));
  REQUIRE(writer->Flush().ok());
  testing::WriteFile(copy.str(), testing::ReadFile(path.str()));  // as a SIGKILL would leave it
  StatusOr<std::optional<WriterSummary>> quick = ReadWriterSummary(copy.str());
  REQUIRE(quick.ok());
  CHECK_FALSE(quick->has_value());
  CHECK(ReadAll(*MustOpen(copy.str())).size() == 100);
  CHECK_FALSE(ReadWriterSummary(path.str() + ".absent").ok());
}

TEST_CASE("an uncreatable trace path is an error, not a crash", "[formats]") {
  auto writer = TraceWriter::Create("/nonexistent-dir/x.ndt", SampleHeader());
  REQUIRE_FALSE(writer.ok());
  CHECK_THAT(writer.status().message(), Catch::Contains("/nonexistent-dir/x.ndt") &&
                                            Catch::Contains("No such file"));
}

TEST_CASE("a full disk stops the writer, counts what was lost and keeps whole chunks readable",
          "[formats]") {
  TempPath path("full.ndt");
  // RLIMIT_FSIZE turns writes past 64 KiB into EFBIG, the way a full disk fails them.
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limited = saved;
  limited.rlim_cur = 64 << 10;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  WriterOptions options;
  options.chunk_bytes = 8 << 10;
  options.compression_level = -5;  // barely compresses: reach the limit quickly
  auto writer = MustCreate(path.str(), options);
  for (uint64_t i = 0; i < 20000; ++i) writer->Append(SampleOp(i));
  const Status closed = writer->Close();
  ::setrlimit(RLIMIT_FSIZE, &saved);

  REQUIRE_FALSE(closed.ok());
  CHECK_THAT(closed.message(), Catch::Contains("write failed"));
  const uint64_t dropped = writer->stats().records_dropped;
  CHECK(dropped > 0);
  CHECK_FALSE(writer->Append(SampleOp(20000)));
  CHECK(writer->stats().records_dropped == dropped + 1);

  auto reader = MustOpen(path.str());
  CHECK_FALSE(reader->complete());
  const auto records = ReadAll(*reader);
  CHECK(records.size() > 0);
  CHECK(records.size() + dropped == 20000);
  for (size_t i = 0; i < records.size(); ++i) REQUIRE(records[i] == Record{SampleOp(i)});
}

TEST_CASE("a write past the file size limit never raises SIGXFSZ in the process", "[formats]") {
  // SIGXFSZ at its default ends the process: the writer blocks it around each write and takes
  // back the one the failing write raised, on its own threads and on the caller's (Close).
  TempPath path("xfsz.ndt");
  struct sigaction saved_action{}, default_action{};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  REQUIRE(::sigaction(SIGXFSZ, &default_action, &saved_action) == 0);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  rlimit limited = saved;
  limited.rlim_cur = 16 << 10;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  WriterOptions options;
  options.chunk_bytes = 4 << 10;
  options.compression_level = -5;
  auto writer = MustCreate(path.str(), options);
  for (uint64_t i = 0; i < 20000; ++i) writer->Append(SampleOp(i));
  (void)writer->Flush();
  const bool failed = !writer->status().ok();
  const Status closed = writer->Close();
  ::setrlimit(RLIMIT_FSIZE, &saved);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  const bool xfsz_pending = sigismember(&pending, SIGXFSZ) == 1;
  ::sigaction(SIGXFSZ, &saved_action, nullptr);

  CHECK(failed);
  REQUIRE_FALSE(closed.ok());
  CHECK_THAT(closed.message(), Catch::Contains("File too large"));
  CHECK_FALSE(xfsz_pending);
  auto reader = MustOpen(path.str());
  CHECK(ReadAll(*reader).size() > 0);
}

TEST_CASE("a signal the program blocks in its threads is never delivered to the writer's",
          "[formats]") {
  // Created on a thread that blocks SIGUSR1 or not, the writer's threads block every signal:
  // a process-directed SIGUSR1 (default: terminate) stays pending until the program takes it.
  TempPath path("blocked.ndt");
  auto writer = MustCreate(path.str());
  sigset_t usr1, previous;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &usr1, &previous) == 0);
  for (uint64_t i = 0; i < 1000; ++i) writer->Append(SampleOp(i));
  REQUIRE(::kill(::getpid(), SIGUSR1) == 0);
  REQUIRE(writer->Flush().ok());
  const timespec wait{2, 0};
  const int taken = sigtimedwait(&usr1, nullptr, &wait);  // still pending for this thread
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  CHECK(taken == SIGUSR1);
  REQUIRE(writer->Close().ok());
}

TEST_CASE("a trace flushed but never closed is readable and reported incomplete", "[formats]") {
  TempPath path("open.ndt");
  TempPath copy("open-copy.ndt");
  auto writer = MustCreate(path.str());
  for (uint64_t i = 0; i < 1000; ++i) writer->Append(SampleOp(i));
  REQUIRE(writer->Flush().ok());
  testing::WriteFile(copy.str(), testing::ReadFile(path.str()));  // as a SIGKILL would leave it

  auto reader = MustOpen(copy.str());
  CHECK_FALSE(reader->complete());
  CHECK(ReadAll(*reader).size() == 1000);
  CHECK(reader->damage().empty());
}

TEST_CASE("an idle thread's records reach the file by the flush timer, without Flush",
          "[formats]") {
  TempPath path("idle.ndt");
  TempPath copy("idle-copy.ndt");
  WriterOptions options;
  options.flush_interval = std::chrono::milliseconds(5);
  auto writer = MustCreate(path.str(), options);
  // One thread's first buffer (no written one to swap in yet), then another's second.
  std::thread([&] {
    for (uint64_t i = 0; i < 10; ++i) writer->Append(SampleOp(i, 1));
  }).join();
  for (uint64_t i = 0; i < 10; ++i) writer->Append(SampleOp(10 + i));
  size_t read = 0;
  for (int attempt = 0; attempt < 1000 && read < 20; ++attempt) {  // up to 10 s on a busy machine
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    testing::WriteFile(copy.str(), testing::ReadFile(path.str()));  // as a SIGKILL would leave it
    read = ReadAll(*MustOpen(copy.str())).size();
  }
  CHECK(read == 20);
  REQUIRE(writer->Close().ok());
}

TEST_CASE("blobs are stored once per content and read back verified", "[formats]") {
  TempPath path("blobs.ndt");
  auto writer = MustCreate(path.str());
  std::vector<std::byte> big(10 << 20);  // spans three blob parts
  std::mt19937_64 rng(7);
  for (auto& b : big) b = static_cast<std::byte>(rng());
  const auto id = writer->PutBlob(big);
  REQUIRE(id.ok());
  const auto again = writer->PutBlob(big);
  REQUIRE(again.ok());
  CHECK(*again == *id);
  const auto empty = writer->PutBlob({});
  REQUIRE(empty.ok());
  CHECK_FALSE(*empty == *id);
  writer->Append(SampleOp(0));
  REQUIRE(writer->Close().ok());
  CHECK(writer->stats().blobs == 2);

  auto reader = MustOpen(path.str());
  const auto bytes = reader->ReadBlob(*id);
  REQUIRE(bytes.ok());
  CHECK(bytes->size() == big.size());
  CHECK(std::memcmp(bytes->data(), big.data(), big.size()) == 0);
  const auto empty_bytes = reader->ReadBlob(*empty);
  REQUIRE(empty_bytes.ok());
  CHECK(empty_bytes->empty());
  CHECK_THAT(reader->ReadBlob(*id, 1 << 20).status().message(), Catch::Contains("exceeds"));
  CHECK_FALSE(reader->ReadBlob(BlobId{1, 2}).ok());
  CHECK(ReadAll(*reader).size() == 1);
}

}  // namespace
}  // namespace ndt::format
