// RecordRings (tracer/record_ring.h): records appended through per-thread rings reach the trace
// complete and, per appending thread, in order, however the encoder and full rings interleave.
#include "tracer/record_ring.h"

#include <catch2/catch.hpp>
#include <map>
#include <thread>
#include <vector>

#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "support/sample_records.h"

namespace ndt::tracer {
namespace {

using format::OpRecord;
using format::Record;
using ndt::testing::SampleHeader;
using ndt::testing::SampleOp;
using ndt::testing::TempPath;

std::unique_ptr<format::TraceWriter> MustCreate(const std::string& path) {
  format::WriterOptions options;
  options.chunk_bytes = 8 << 10;
  options.when_full = format::FullPolicy::kStall;  // these tests count every record
  auto writer = format::TraceWriter::Create(path, SampleHeader(), options);
  REQUIRE(writer.ok());
  return std::move(writer).value();
}

// Every op of the trace at `path`, grouped by thread in file order.
std::map<uint32_t, std::vector<uint64_t>> OpsByThread(const std::string& path) {
  auto reader = format::TraceReader::Open(path);
  REQUIRE(reader.ok());
  std::map<uint32_t, std::vector<uint64_t>> ops;
  Record record;
  while ((*reader)->Next(&record)) {
    const auto* op = std::get_if<OpRecord>(&record);
    REQUIRE(op != nullptr);
    REQUIRE(*op == SampleOp(op->sequence, op->thread_id));
    ops[op->thread_id].push_back(op->sequence);
  }
  CHECK((*reader)->damage().empty());
  return ops;
}

TEST_CASE("records of 4 threads through small rings all arrive, each thread's in order",
          "[tracer]") {
  TempPath path("rings.ndt");
  auto writer = MustCreate(path.str());
  constexpr uint32_t kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  RecordRings::Stats stats;
  {
    RecordRings rings(writer.get(), 64);  // small: the threads fill them and encode themselves
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 0; i < kPerThread; ++i) {
          const OpRecord op = SampleOp(t * kPerThread + i, t);
          if (i % 3 == 0) {
            rings.Append(Record(op), t);  // records other than ops go through the same ring
          } else if (i % 3 == 1) {
            rings.Append(op, t);
          } else {
            OpRecord swapped = op;
            rings.AppendSwap(swapped, t);
          }
        }
      });
    }
    for (auto& thread : threads) thread.join();
    rings.Stop();
    stats = rings.stats();
  }
  REQUIRE(writer->Close().ok());
  CHECK(stats.appended == kThreads * kPerThread);
  CHECK(stats.rings == kThreads);
  const auto ops = OpsByThread(path.str());
  REQUIRE(ops.size() == kThreads);
  for (const auto& [thread, sequences] : ops) {
    REQUIRE(sequences.size() == kPerThread);
    for (uint64_t i = 0; i < kPerThread; ++i) REQUIRE(sequences[i] == thread * kPerThread + i);
  }
}

TEST_CASE("a thread that drains its ring before writing directly keeps its records in order",
          "[tracer]") {
  TempPath path("drain.ndt");
  auto writer = MustCreate(path.str());
  {
    RecordRings rings(writer.get(), 64);
    for (uint64_t i = 0; i < 1000; ++i) {
      if (i % 10 == 9) {
        rings.DrainCallingThread();
        writer->Append(SampleOp(i, 7), 7);
      } else {
        rings.Append(SampleOp(i, 7), 7);
      }
    }
    rings.Stop();
    // After Stop, records go to the writer directly, still in order.
    for (uint64_t i = 1000; i < 1100; ++i) rings.Append(SampleOp(i, 7), 7);
    CHECK(rings.stats().direct == 100);
  }
  REQUIRE(writer->Close().ok());
  const auto ops = OpsByThread(path.str());
  REQUIRE(ops.size() == 1);
  const std::vector<uint64_t>& sequences = ops.at(7);
  REQUIRE(sequences.size() == 1100);
  for (uint64_t i = 0; i < 1100; ++i) REQUIRE(sequences[i] == i);
}

TEST_CASE("a ring is reused by a later thread once its thread has exited", "[tracer]") {
  TempPath path("reuse.ndt");
  auto writer = MustCreate(path.str());
  {
    RecordRings rings(writer.get(), 64);
    for (uint32_t t = 0; t < 8; ++t) {
      std::thread([&, t] {
        for (uint64_t i = 0; i < 100; ++i) rings.Append(SampleOp(t * 100 + i, t), t);
      }).join();
    }
    rings.Stop();
    CHECK(rings.stats().rings == 1);
    CHECK(rings.stats().appended == 800);
  }
  REQUIRE(writer->Close().ok());
  const auto ops = OpsByThread(path.str());
  CHECK(ops.size() == 8);
  for (const auto& [thread, sequences] : ops) CHECK(sequences.size() == 100);
}

}  // namespace
}  // namespace ndt::tracer
