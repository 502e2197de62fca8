// RecordRings (tracer/record_ring.h): records appended through per-thread rings reach the trace
// complete and, per appending thread, in order, however the encoder and full rings interleave.
#include "tracer/record_ring.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <map>
#include <string>
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

// Every record of the trace at `path`, in file order; the trace undamaged.
std::vector<Record> ReadBack(const std::string& path) {
  auto reader = format::TraceReader::Open(path);
  REQUIRE(reader.ok());
  std::vector<Record> records = ndt::testing::ReadAll(**reader);
  CHECK((*reader)->damage().empty());
  return records;
}

// Every op of the trace at `path`, grouped by thread in file order.
std::map<uint32_t, std::vector<uint64_t>> OpsByThread(const std::string& path) {
  std::map<uint32_t, std::vector<uint64_t>> ops;
  for (const Record& record : ReadBack(path)) {
    const auto* op = std::get_if<OpRecord>(&record);
    REQUIRE(op != nullptr);
    REQUIRE(*op == SampleOp(op->sequence, op->thread_id));
    ops[op->thread_id].push_back(op->sequence);
  }
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

// Held records (AppendHeld) for a test: ticket t "arrives" once released[t] is set, and then
// settles to SampleOp's digest of the op; ticket kLostTicket never arrives.
struct TestDigests {
  static constexpr uint64_t kLostTicket = 99;
  std::atomic<bool> released[4] = {};
  std::atomic<int> waits_on_owner{0};  // settles that waited, on the thread `owner`
  std::atomic<std::thread::id> owner{};

  RecordRings::Held Held() {
    return {[this](Record& record, std::vector<uint64_t>& tickets, bool wait) -> uint64_t {
              uint64_t lost = 0;
              auto& op = std::get<OpRecord>(record);
              while (!tickets.empty()) {
                const uint64_t ticket = tickets.back();
                if (ticket == kLostTicket) {
                  op.outputs.clear();
                  ++lost;
                } else {
                  if (!released[ticket].load() && !wait) break;
                  if (wait && std::this_thread::get_id() == owner.load()) ++waits_on_owner;
                  while (!released[ticket].load()) std::this_thread::yield();
                  op.outputs.at(0).digest = {op.sequence, ~op.sequence};
                }
                tickets.pop_back();
              }
              return lost;
            },
            [](uint64_t lost) -> Record {
              format::TracerNote note;
              note.text = std::to_string(lost) + " lost";
              return note;
            }};
  }
};

// SampleOp(sequence, thread) with its digest a placeholder for GPU digest `ticket`.
Record HeldOp(uint64_t sequence, uint32_t thread, uint64_t ticket) {
  OpRecord op = SampleOp(sequence, thread);
  op.outputs.at(0).digest = {ticket, 0};
  return op;
}

TEST_CASE("a record held for its GPU digests holds back its own thread's records only",
          "[tracer]") {
  TempPath path("held.ndt");
  auto writer = MustCreate(path.str());
  TestDigests digests;
  constexpr uint64_t kRecords = 300;  // past a 64-slot ring
  {
    RecordRings rings(writer.get(), 64, nullptr, digests.Held());
    std::thread owner([&] {
      digests.owner.store(std::this_thread::get_id());
      rings.Append(SampleOp(0, 1), 1);
      rings.AppendHeld(HeldOp(1, 1, 1), {1}, 1);
      // The ring fills behind the held record: this thread then waits for its digest.
      for (uint64_t i = 2; i < kRecords; ++i) rings.Append(SampleOp(i, 1), 1);
      // A held record whose digest never arrives is written without it, a note after it. (On
      // this thread: a thread's records are ordered through its own ring, and this thread's
      // last ones may still wait there when it exits.)
      rings.AppendHeld(HeldOp(kRecords, 1, TestDigests::kLostTicket), {TestDigests::kLostTicket},
                       1);
    });
    // Once the owner fills its ring behind the held record, it waits for the digest (given up
    // on after 20 s: the CHECK then fails).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (digests.waits_on_owner.load() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(digests.waits_on_owner.load() >= 1);
    // Another thread's records are not held back: all of them go through its own small ring
    // while thread 1's digest has not arrived.
    auto other = std::async(std::launch::async, [&] {
      for (uint64_t i = 0; i < kRecords; ++i) rings.Append(SampleOp(1000 + i, 2), 2);
    });
    CHECK(other.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    CHECK(rings.held() == 1);
    digests.released[1] = true;
    owner.join();
    rings.Flush(/*wait=*/true);
    CHECK(rings.held() == 0);
    rings.Stop();
  }
  REQUIRE(writer->Close().ok());
  std::map<uint64_t, std::vector<uint64_t>> by_origin;
  std::vector<std::string> notes;
  for (const Record& record : ReadBack(path.str())) {
    if (const auto* note = std::get_if<format::TracerNote>(&record)) {
      notes.push_back(note->text);
      CHECK(by_origin[1].back() == kRecords);  // right after the record it is about
      continue;
    }
    const auto& op = std::get<OpRecord>(record);
    if (op.sequence == kRecords) {
      CHECK(op.outputs.empty());
    } else {
      CHECK(op == SampleOp(op.sequence, op.thread_id));  // the held one with its digest
    }
    by_origin[op.thread_id].push_back(op.sequence);
  }
  CHECK(notes == std::vector<std::string>{"1 lost"});
  REQUIRE(by_origin[1].size() == kRecords + 1);
  for (uint64_t i = 0; i <= kRecords; ++i) REQUIRE(by_origin[1][i] == i);
  REQUIRE(by_origin[2].size() == kRecords);
  for (uint64_t i = 0; i < kRecords; ++i) REQUIRE(by_origin[2][i] == 1000 + i);
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


// 1000 bytes that differ from op to op.
std::string LargeParam(uint64_t sequence) {
  std::string bytes(1000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + sequence);
  return bytes;
}

// Facts a raw op may carry instead of arguments (RawOp::SetFacts), and what adds them.
struct SampleFacts {
  uint64_t sequence;
  int32_t delta;
};

void AddSample(const SampleFacts& facts, OpRecord& op) {
  op.args.push_back({"facts", facts.sequence});
  op.args.push_back({"delta", int64_t{facts.delta}});
  op.algorithm.emplace().library = "sample " + std::to_string(facts.sequence);
}

// A RawOp (raw_op.h) with one argument of every kind, for op `sequence` of thread `thread`;
// every fourth (sequence % 4 == 2) carries facts for AddSample instead.
const RawOp& SampleRawOp(uint64_t sequence, uint32_t thread) {
  static RawOp raw;  // 7 KB: not on the stack
  ResetRawOp(raw, format::OpKind::kKernelLaunch, "Kernel(float*, int)", 3);
  raw.sequence = sequence;
  raw.thread_id = thread;
  raw.start_ns = 10 * sequence;
  raw.end_ns = 10 * sequence + 5;
  raw.module_id = 4;
  raw.nvtx_range_id = 9;
  raw.status = 700;
  raw.inside = sequence % 5 == 0 ? sequence + 100000 : 0;  // made inside a library call
  if (sequence % 4 == 2) {
    raw.SetFacts<&AddSample>(SampleFacts{sequence, -7});
    return raw;
  }
  REQUIRE(raw.AddDims("grid", 2, 1, 1));
  REQUIRE(raw.AddUnsigned("sharedMemBytes", sequence));
  REQUIRE(raw.AddSigned("offset", -static_cast<int64_t>(sequence)));
  REQUIRE(raw.AddPointer("arg0", {7, 64, 0x7000040}));
  const int32_t count = 33;
  REQUIRE(raw.AddBytes("arg1", &count, sizeof count));
  REQUIRE(raw.AddBytes("arg2", nullptr, 0));
  if (sequence % 3 == 0) {  // a large parameter: 16 of these fill a 64-slot ring's arena
    const std::string large = LargeParam(sequence);
    REQUIRE(raw.AddBytes("arg3", large.data(), large.size()));
  }
  return raw;
}

// The OpRecord a hook would have built for SampleRawOp(sequence, thread).
OpRecord ExpectedOp(uint64_t sequence, uint32_t thread) {
  using format::Argument;
  OpRecord op;
  op.sequence = sequence;
  op.thread_id = thread;
  op.stream_id = 3;
  op.kind = format::OpKind::kKernelLaunch;
  op.name = "Kernel(float*, int)";
  op.status = 700;
  op.start_ns = 10 * sequence;
  op.end_ns = 10 * sequence + 5;
  op.module_id = 4;
  op.nvtx_range_id = 9;
  if (sequence % 4 == 2) {
    op.args.push_back({"facts", sequence});
    op.args.push_back({"delta", int64_t{-7}});
    op.algorithm.emplace().library = "sample " + std::to_string(sequence);
  } else {
    op.args.push_back({"grid", Argument::Dims{2, 1, 1}});
    op.args.push_back({"sharedMemBytes", sequence});
    op.args.push_back({"offset", -static_cast<int64_t>(sequence)});
    op.args.push_back({"arg0", format::DevicePointer{7, 64, 0x7000040}});
    op.args.push_back({"arg1", Argument::Bytes{std::string("\x21\0\0\0", 4)}});
    op.args.push_back({"arg2", Argument::Bytes{}});
    if (sequence % 3 == 0) op.args.push_back({"arg3", Argument::Bytes{LargeParam(sequence)}});
  }
  if (sequence % 5 == 0) op.args.push_back({"insideOp", sequence + 100000});
  return op;
}

TEST_CASE("raw ops reach the trace as the op records a hook would build, in order with others",
          "[tracer]") {
  TempPath path("raw.ndt");
  auto writer = MustCreate(path.str());
  {
    // Small: the thread fills its slots, and its arena with the large parameters, and encodes
    // records itself too; the arena wraps many times.
    RecordRings rings(writer.get(), 64);
    for (uint64_t i = 0; i < 3000; ++i) {
      if (i % 2 == 0) {
        rings.AppendRaw(SampleRawOp(i, 5), 5);
      } else {
        rings.Append(SampleOp(i, 5), 5);
      }
    }
    rings.Stop();
    rings.AppendRaw(SampleRawOp(3000, 5), 5);  // after Stop: straight to the writer
  }
  REQUIRE(writer->Close().ok());
  uint64_t next = 0;
  for (const Record& record : ReadBack(path.str())) {
    const auto* op = std::get_if<OpRecord>(&record);
    REQUIRE(op != nullptr);
    REQUIRE(op->sequence == next);
    REQUIRE(*op == (next % 2 == 0 ? ExpectedOp(next, 5) : SampleOp(next, 5)));
    ++next;
  }
  CHECK(next == 3001);
}

TEST_CASE("NVTX range records built in their slots equal the records, whatever the slot held",
          "[tracer]") {
  TempPath path("nvtx.ndt");
  auto writer = MustCreate(path.str());
  // Names of every length (short ones in the string itself, long ones on the heap), domains or
  // none, in slots that held ops, other records and longer names before.
  const auto expected = [](uint64_t i) {
    format::NvtxRangeRecord record;
    record.thread_id = 7;
    record.kind = i % 3 == 0 ? format::NvtxEvent::kPop : format::NvtxEvent::kPush;
    record.push = record.kind == format::NvtxEvent::kPush;
    record.name = std::string(i % 41, static_cast<char>('a' + i % 26));
    record.before_op = i;
    record.time_ns = 1000 + i;
    record.range_id = (uint64_t{7} << 32) | i;
    record.parent_id = i / 2;
    record.domain = i % 4 == 0 ? "" : std::string("pytorch.module") + std::string(i % 9, 'x');
    record.category = static_cast<uint32_t>(i % 5);
    return record;
  };
  {
    RecordRings rings(writer.get(), 64);
    for (uint64_t i = 0; i < 3000; ++i) {
      if (i % 5 == 1) {
        rings.Append(SampleOp(i, 7), 7);
        continue;
      }
      if (i % 5 == 2) {
        rings.Append(Record(format::TracerNote{format::Severity::kInfo, "note", i, 7}), 7);
        continue;
      }
      const format::NvtxRangeRecord record = expected(i);
      rings.AppendNvtx({record, record.name, record.domain}, 7);
    }
    rings.Stop();
    const format::NvtxRangeRecord last = expected(3000);
    rings.AppendNvtx({last, last.name, last.domain}, 7);  // after Stop: straight to the writer
  }
  REQUIRE(writer->Close().ok());
  std::vector<format::NvtxRangeRecord> read, wanted;
  for (const Record& record : ReadBack(path.str())) {
    if (const auto* range = std::get_if<format::NvtxRangeRecord>(&record)) read.push_back(*range);
  }
  for (uint64_t i = 0; i <= 3000; ++i) {
    if (i % 5 != 1 && i % 5 != 2) wanted.push_back(expected(i));
  }
  CHECK(read == wanted);
}

TEST_CASE("a raw op refuses arguments and bytes beyond its fixed size", "[tracer]") {
  RawOp raw;
  ResetRawOp(raw, format::OpKind::kMemset, "cuMemsetD8_v2", 0);
  std::vector<unsigned char> big(RawOp::kMaxBytes + 1, 1);
  CHECK_FALSE(raw.AddBytes("big", big.data(), big.size()));
  CHECK(raw.arg_count == 0);
  CHECK(raw.AddBytes("all", big.data(), RawOp::kMaxBytes));
  CHECK_FALSE(raw.AddBytes("one more", big.data(), 1));
  for (size_t i = 1; i < RawOp::kMaxArgs; ++i) CHECK(raw.AddUnsigned("n", i));
  CHECK_FALSE(raw.AddUnsigned("n", 0));
  CHECK(raw.arg_count == RawOp::kMaxArgs);
  OpRecord op;
  ToOpRecord(raw, op);
  CHECK(op.args.size() == RawOp::kMaxArgs);
  CHECK(std::get<format::Argument::Bytes>(op.args[0].value).data.size() == RawOp::kMaxBytes);
}

}  // namespace
}  // namespace ndt::tracer
