// What `ndtrace diff` does not count as a divergence in a deterministic program whose threads
// race and whose allocator places tensors differently from run to run (placement), and how it
// traces data that reached the host back to the kernel that wrote it.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/trace_writer.h"
#include "replayer/trace_diff.h"
#include "support/sample_records.h"
#include "support/temp_dir.h"

namespace ndt::replay {
namespace {

using format::BufferDigest;
using format::DevicePointer;
using format::OpKind;
using format::OpRecord;
using format::Record;
using format::StateDigestRecord;
using testing::TempDir;

BufferDigest Whole(uint64_t allocation, uint64_t digest, bool suballocated) {
  BufferDigest b;
  b.pointer = {allocation, 0, 0x7f0000000000 + (allocation << 20)};
  b.bytes = 1 << 20;
  b.digest = {digest, ~digest};
  b.suballocated = suballocated;
  return b;
}

OpRecord Op(uint64_t sequence, uint32_t thread, OpKind kind, std::string name) {
  OpRecord op;
  op.sequence = sequence;
  op.thread_id = thread;
  op.stream_id = 1;
  op.kind = kind;
  op.name = std::move(name);
  return op;
}

DiffReport Diff(const std::vector<Record>& a, const std::vector<Record>& b) {
  TempDir dir;
  auto report = DiffTraces(testing::WriteTrace(dir, "a.ndt", a), testing::WriteTrace(dir, "b.ndt", b));
  REQUIRE(report.ok());
  return std::move(report).value();
}

}  // namespace

TEST_CASE("whole digests of sub-allocated memory that differ are notes, not divergences",
          "[replayer]") {
  const auto run = [](uint64_t segment_digest, bool suballocated) {
    OpRecord launch = Op(0, 0, OpKind::kKernelLaunch, "Step(float*, int, float)");
    launch.args = {{"arg0", DevicePointer{1, 4096, 0}}};
    launch.outputs = {Whole(1, segment_digest, suballocated)};
    launch.outputs[0].role = "arg0";
    return std::vector<Record>{
        launch, StateDigestRecord{0, "exit", {Whole(1, segment_digest, suballocated)}, 10}};
  };
  const DiffReport placed = Diff(run(1, true), run(2, false));
  CHECK(placed.identical());
  REQUIRE(placed.notes.size() == 1);
  CHECK_THAT(placed.notes[0], Catch::Contains("sub-allocated") && Catch::StartsWith("2 digest"));
  // The same difference in memory that holds one buffer is a divergence.
  const DiffReport whole = Diff(run(1, false), run(2, false));
  REQUIRE(whole.first_divergence.has_value());
  CHECK(whole.first_divergence->klass == DivergenceClass::kNondeterministicOp);
}

TEST_CASE("a state digest taken while several threads ran is not compared; one at exit is",
          "[replayer]") {
  const auto run = [](uint32_t second_thread, uint64_t mid_digest, uint64_t exit_digest) {
    return std::vector<Record>{
        Op(0, 0, OpKind::kMemset, "cuMemsetD8_v2"),
        Op(1, second_thread, OpKind::kMemset, "cuMemsetD8_v2"),
        StateDigestRecord{1, "every 2 ops", {Whole(1, mid_digest, false)}, 10},
        Op(2, 0, OpKind::kMemset, "cuMemsetD8_v2"),
        // The exit digest after another op count: only its allocations are compared.
        StateDigestRecord{
            second_thread == 0 ? 2u : 3u, "exit", {Whole(1, exit_digest, false)}, 20}};
  };
  const DiffReport threads = Diff(run(1, 5, 9), run(1, 6, 9));
  CHECK(threads.identical());
  REQUIRE(threads.notes.size() == 1);
  CHECK_THAT(threads.notes[0], Catch::Contains("several threads issued ops"));
  const DiffReport exit = Diff(run(1, 5, 9), run(1, 5, 10));
  REQUIRE(exit.first_divergence.has_value());
  CHECK(exit.first_divergence->klass == DivergenceClass::kUncovered);
  // One thread: the mid-run digest is a checkpoint, compared.
  const DiffReport single = Diff(run(0, 5, 9), run(0, 6, 9));
  REQUIRE(single.first_divergence.has_value());
  CHECK(single.first_divergence->klass == DivergenceClass::kUncovered);
  CHECK(single.first_divergence->op.sequence == 1);
}

TEST_CASE("creating and destroying streams and events is not aligned", "[replayer]") {
  // A pool refilled by whichever thread finds it empty: thread 2 in run A, thread 3 in run B,
  // and a second event in run B only.
  const auto run = [](uint32_t creator, int events) {
    std::vector<Record> records{Op(0, 1, OpKind::kMemset, "cuMemsetD8_v2")};
    for (int i = 0; i < events; ++i) {
      OpRecord create = Op(1 + i, creator, OpKind::kOther, "cuEventCreate");
      create.args = {{"event", uint64_t{(uint64_t{creator} << 32) | (i + 1)}}};
      records.push_back(create);
    }
    OpRecord record = Op(9, 1, OpKind::kOther, "cuEventRecord");
    record.args = {{"event", uint64_t{(uint64_t{creator} << 32) | 1}}};
    records.push_back(record);
    return records;
  };
  const DiffReport report = Diff(run(2, 1), run(3, 2));
  CHECK(report.identical());
  CHECK(report.structural_differences == 0);
}

TEST_CASE(
    "host bytes of an asynchronous copy that differ point back to the kernel that wrote "
    "its source",
    "[replayer]") {
  const auto run = [](uint64_t host_digest) {
    // A caching allocator's segment (allocation 1): the racing kernel writes the block at
    // offset 8192; a later kernel only reads it (const) and writes another block.
    OpRecord racing = Op(0, 0, OpKind::kKernelLaunch, "RacySum(float const*, float*, int, int)");
    racing.args = {{"arg0", DevicePointer{2, 0, 0}}, {"arg1", DevicePointer{1, 8192, 0}}};
    OpRecord reader =
        Op(1, 0, OpKind::kKernelLaunch, "VectorAdd(float const*, float const*, float*, int)");
    reader.args = {{"arg0", DevicePointer{1, 8192, 0}},
                   {"arg1", DevicePointer{1, 0, 0}},
                   {"arg2", DevicePointer{1, 4096, 0}}};
    OpRecord copy = Op(2, 0, OpKind::kMemcpy, "cuMemcpyDtoHAsync_v2");
    copy.args = {{"dst", std::monostate{}}, {"src", DevicePointer{1, 8192, 0}}};
    OpRecord sync = Op(3, 0, OpKind::kSynchronize, "cuStreamSynchronize");
    BufferDigest host;
    host.role = "dst of op 2";
    host.pointer = {1, 8192, 0};
    host.bytes = 16;
    host.digest = {host_digest, 1};
    sync.outputs = {host};
    return std::vector<Record>{racing, reader, copy, sync};
  };
  const DiffReport report = Diff(run(1), run(2));
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kPropagated);
  CHECK(d.op.name == "cuStreamSynchronize");
  CHECK_THAT(d.what, Catch::Contains("copied to the host by op 2"));
  REQUIRE(d.root.has_value());
  CHECK(d.root->sequence == 0);
  CHECK(d.root->name == "RacySum(float const*, float*, int, int)");
  CHECK(d.root->lane_index == 0);
}

TEST_CASE("thread and stream ids read as lineage paths", "[formats]") {
  CHECK(format::ThreadLabel(0) == "0");
  CHECK(format::ThreadLabel(2) == "2");
  CHECK(format::ThreadLabel(2 | 1 << 8) == "2.1");
  CHECK(format::ThreadLabel(0x80000000u | 0xabcdef) == "#00abcdef");
  CHECK(format::ThreadLabel(0x40000000u | 3) == "?3");
  CHECK(format::StreamLabel(0) == "0");
  CHECK(format::StreamLabel(3) == "3");
  CHECK(format::StreamLabel(0x01000000u | (2 | 1 << 8) << 8 | 1) == "2.1:1");
  CHECK(format::StreamLabel(0x40000000u | 2) == "2:default");
  CHECK(format::StreamLabel(0x40000000u) == "0:default");
}

}  // namespace ndt::replay
