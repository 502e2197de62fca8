// The synthetic trace generator (tools/synthetic_trace.h): the properties the CLI tests, the
// writer benchmark and the fuzz seed corpora rely on.
#include "tools/synthetic_trace.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using ndt::format::Record;
using ndt::tools::SyntheticOptions;

using ndt::testing::TempDir;

struct Trace {
  ndt::format::TraceHeader header;
  std::vector<Record> records;
};

Trace WriteAndRead(const std::string& path, const SyntheticOptions& options) {
  ndt::format::WriterOptions writer_options;
  writer_options.when_full = ndt::format::FullPolicy::kStall;
  writer_options.chunk_bytes = 8192;
  auto writer =
      ndt::format::TraceWriter::Create(path, ndt::tools::SyntheticHeader(options), writer_options);
  REQUIRE(writer.ok());
  REQUIRE(ndt::tools::WriteSyntheticTrace(**writer, options).ok());
  REQUIRE((*writer)->Close().ok());
  auto reader = ndt::format::TraceReader::Open(path);
  REQUIRE(reader.ok());
  Trace trace;
  trace.header = (*reader)->header();
  Record record;
  while ((*reader)->Next(&record)) trace.records.push_back(record);
  CHECK((*reader)->complete());
  CHECK((*reader)->damage().empty());
  return trace;
}

// The record with every time zeroed: what must not depend on when the generator ran.
Record WithoutTimes(Record record) {
  if (auto* op = std::get_if<ndt::format::OpRecord>(&record)) {
    op->start_ns = op->end_ns = 0;
  } else if (auto* range = std::get_if<ndt::format::NvtxRangeRecord>(&record)) {
    range->time_ns = 0;
  } else if (auto* note = std::get_if<ndt::format::TracerNote>(&record)) {
    note->time_ns = 0;
  } else if (auto* state = std::get_if<ndt::format::StateDigestRecord>(&record)) {
    state->time_ns = 0;
  } else if (auto* activity = std::get_if<ndt::format::GpuActivityRecord>(&record)) {
    activity->start_ns = activity->end_ns = 0;
  }
  return record;
}

}  // namespace

TEST_CASE("the synthetic trace numbers ops densely from 0 across concurrent threads", "[cli]") {
  TempDir dir;
  SyntheticOptions options;
  options.steps = 4;
  options.threads = 4;
  options.streams = 3;
  const Trace trace = WriteAndRead(dir / "threads.ndt", options);

  std::set<uint64_t> sequences;
  std::map<uint32_t, const ndt::format::OpRecord*> last_by_thread;
  std::set<uint32_t> streams;
  for (const Record& record : trace.records) {
    const auto* op = std::get_if<ndt::format::OpRecord>(&record);
    if (op == nullptr) continue;
    CHECK(sequences.insert(op->sequence).second);
    CHECK(op->thread_id < 4);
    CHECK(op->start_ns <= op->end_ns);
    streams.insert(op->stream_id);
    // One thread's records come back in the order it appended them.
    if (auto last = last_by_thread.find(op->thread_id); last != last_by_thread.end()) {
      CHECK(last->second->sequence < op->sequence);
      CHECK(last->second->end_ns <= op->start_ns);
    }
    last_by_thread[op->thread_id] = op;
  }
  REQUIRE(sequences.size() == ndt::tools::SyntheticOpCount(options));
  CHECK(*sequences.begin() == 0);
  CHECK(*sequences.rbegin() == sequences.size() - 1);
  CHECK(last_by_thread.size() == 4);
  CHECK(streams.size() == 4 * 3);
}

TEST_CASE("the synthetic trace holds every record type a tracer writes", "[cli]") {
  TempDir dir;
  SyntheticOptions options;
  options.steps = 2;
  const Trace trace = WriteAndRead(dir / "types.ndt", options);
  std::set<std::string> types;
  bool algorithm = false;
  bool rng = false;
  bool summary = false;
  bool opaque = false;
  for (const Record& record : trace.records) {
    types.insert(ndt::format::RecordTypeName(record));
    if (const auto* op = std::get_if<ndt::format::OpRecord>(&record)) {
      algorithm |= op->algorithm.has_value();
      opaque |= op->algorithm && op->algorithm->opaque.size() == 64;
      rng |= op->rng.has_value();
      for (const auto& output : op->outputs) summary |= output.summary.count != 0;
    }
  }
  // Everything but DroppedRecords, which only the writer adds, and PythonStackRecord, which only
  // a request for an op's Python stack adds.
  CHECK(types.size() == std::variant_size_v<Record> - 2);
  CHECK(algorithm);
  CHECK(opaque);
  CHECK(rng);
  CHECK(summary);
  CHECK(trace.header.gpus.size() == 1);
  CHECK(trace.header.gpus[0].simulated);
  CHECK(trace.header.command_line.at(0) == "ndtrace-synth");
}

TEST_CASE("the synthetic trace depends on the seed and on nothing else but time", "[cli]") {
  TempDir dir;
  SyntheticOptions options;
  options.steps = 3;
  options.seed = 42;
  const Trace first = WriteAndRead(dir / "first.ndt", options);
  const Trace second = WriteAndRead(dir / "second.ndt", options);
  REQUIRE(first.records.size() == second.records.size());
  for (size_t i = 0; i < first.records.size(); ++i) {
    INFO("record " << i);
    CHECK(WithoutTimes(first.records[i]) == WithoutTimes(second.records[i]));
  }

  options.seed = 43;
  const Trace other = WriteAndRead(dir / "other.ndt", options);
  REQUIRE(other.records.size() == first.records.size());
  // Every op that carries digests or RNG state differs with the seed.
  size_t seeded_ops = 0;
  for (size_t i = 0; i < first.records.size(); ++i) {
    const auto* op = std::get_if<ndt::format::OpRecord>(&first.records[i]);
    if (op == nullptr || (op->outputs.empty() && !op->rng)) continue;
    ++seeded_ops;
    INFO("op " << op->sequence);
    CHECK_FALSE(WithoutTimes(first.records[i]) == WithoutTimes(other.records[i]));
  }
  CHECK(seeded_ops >= 3 * 8);
}

TEST_CASE("the synthetic generator refuses out-of-range options", "[cli]") {
  SyntheticOptions options;
  options.threads = 0;
  CHECK_FALSE(ndt::tools::ValidateSyntheticOptions(options).ok());
  options.threads = 1;
  options.streams = 65;
  CHECK_THAT(ndt::tools::ValidateSyntheticOptions(options).message(), Catch::Contains("--streams"));
  options.streams = 1;
  CHECK(ndt::tools::ValidateSyntheticOptions(options).ok());
}
