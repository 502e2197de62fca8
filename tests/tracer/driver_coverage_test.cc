// The driver beyond plain launches, on the stand-in device: streams and events with stable ids,
// pool, stream-ordered and virtual-memory allocations named canonically, stream capture and
// graph launches, and a driver the program dlopen()s RTLD_LOCAL itself (streams_graphs).
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "support/traced_program.h"

namespace ndt::test {
namespace {

using format::AllocationRecord;
using format::OpKind;

std::optional<uint64_t> UnsignedArg(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* value = std::get_if<uint64_t>(&argument.value)) return *value;
  }
  return std::nullopt;
}

std::vector<OpRecord> Named(const std::vector<OpRecord>& ops, const std::string& name) {
  std::vector<OpRecord> named;
  for (const OpRecord& op : ops) {
    if (op.name == name) named.push_back(op);
  }
  return named;
}

struct Recording {
  RunResult run;
  std::vector<Record> records;
  std::vector<OpRecord> ops;
};

Recording RecordStreamsGraphs(const std::string& name) {
  const std::string trace = TempPath(name + ".ndt");
  Recording recording;
  recording.run = RecordRun(trace, PROG_STREAMS_GRAPHS);
  INFO(recording.run.err);
  REQUIRE(recording.run.status == 0);
  recording.records = ReadAll(trace);
  recording.ops = Ops(recording.records);
  std::remove(trace.c_str());
  return recording;
}

TEST_CASE("streams_graphs under ndtrace record keeps its output", "[tracer][driver]") {
  const RunResult plain = Run("'" PROG_STREAMS_GRAPHS "'");
  REQUIRE(plain.status == 0);
  const Recording traced = RecordStreamsGraphs("output");
  CHECK(traced.run.out == plain.out);
}

TEST_CASE("streams and events get stable ids and their ops are recorded", "[tracer][driver]") {
  const Recording r = RecordStreamsGraphs("streams");
  const std::vector<OpRecord> created = Named(r.ops, "cuStreamCreateWithPriority");
  // high and low, then first and the re-created ones (cudaStreamCreate takes the same path).
  REQUIRE(created.size() >= 4);
  CHECK(created[0].stream_id == 1);
  CHECK(created[1].stream_id == 2);
  CHECK(UnsignedArg(created[0], "flags") == 1u);  // CU_STREAM_NON_BLOCKING
  std::set<uint32_t> stream_ids;
  for (const OpRecord& op : created) stream_ids.insert(op.stream_id);
  CHECK(stream_ids.size() == created.size());  // every created stream is a new id

  const std::vector<OpRecord> events = Named(r.ops, "cuEventCreate");
  REQUIRE(events.size() == 2);
  CHECK(UnsignedArg(events[0], "event") == 1u);
  CHECK(UnsignedArg(events[1], "event") == 2u);

  // Before the capture: high records the fork event, low waits on it, and the reverse.
  const std::vector<OpRecord> records = Named(r.ops, "cuEventRecord");
  const std::vector<OpRecord> waits = Named(r.ops, "cuStreamWaitEvent");
  REQUIRE(records.size() >= 2);
  REQUIRE(waits.size() >= 2);
  CHECK(records[0].stream_id == 1);
  CHECK(UnsignedArg(records[0], "event") == 1u);
  CHECK(waits[0].stream_id == 2);
  CHECK(UnsignedArg(waits[0], "event") == 1u);
  CHECK(UnsignedArg(waits[0], "eventStream") == 1u);
  CHECK(waits[1].stream_id == 1);
  CHECK(UnsignedArg(waits[1], "eventStream") == 2u);

  // cuEventSynchronize is a host synchronisation of low, where b was copied out.
  const std::vector<OpRecord> event_syncs = Named(r.ops, "cuEventSynchronize");
  REQUIRE(event_syncs.size() == 1);
  CHECK(event_syncs[0].kind == OpKind::kSynchronize);
  CHECK(event_syncs[0].stream_id == 2);
  REQUIRE(event_syncs[0].outputs.size() == 1);
  CHECK(event_syncs[0].outputs[0].bytes == 4096 * 4);
}

TEST_CASE("a stream destroyed and re-created at the same handle gets a new id",
          "[tracer][driver]") {
  const Recording r = RecordStreamsGraphs("reuse");
  // The stand-in gives the handle back: the program says so. Without retirement at destroy,
  // the re-created stream would reuse the first one's id.
  REQUIRE(r.run.err.find("a later stream at the first one's handle: yes") != std::string::npos);
  std::set<uint32_t> destroyed;
  for (const OpRecord& op : Named(r.ops, "cuStreamDestroy_v2")) {
    CHECK(destroyed.insert(op.stream_id).second);  // no id is destroyed twice
  }
  CHECK(destroyed.size() >= 4);
}

TEST_CASE("pool, stream-ordered and mapped allocations are named canonically",
          "[tracer][driver]") {
  const Recording r = RecordStreamsGraphs("allocations");
  std::map<std::string, std::vector<AllocationRecord>> by_api;
  for (const Record& record : r.records) {
    if (const auto* allocation = std::get_if<AllocationRecord>(&record)) {
      by_api[allocation->api].push_back(*allocation);
    }
  }
  REQUIRE(by_api["cuMemAllocFromPoolAsync"].size() == 1);
  REQUIRE(by_api["cuMemAllocAsync"].size() == 1);
  REQUIRE(by_api["cuMemMap"].size() == 1);
  REQUIRE(by_api["cuMemUnmap"].size() == 1);
  CHECK(by_api["cuMemAllocFromPoolAsync"][0].stream_id == 1);
  CHECK(by_api["cuMemAllocAsync"][0].stream_id == 2);
  const AllocationRecord mapped = by_api["cuMemMap"][0];
  CHECK(mapped.bytes >= 4096 * 4);
  CHECK(by_api["cuMemUnmap"][0].allocation_id == mapped.allocation_id);
  // The kernel on the mapped buffer names it by (allocation id, offset 0).
  bool launched_on_mapped = false;
  for (const OpRecord& op : r.ops) {
    if (op.kind != OpKind::kKernelLaunch || op.args.size() < 4) continue;
    for (const Argument& argument : op.args) {
      const auto* pointer = std::get_if<DevicePointer>(&argument.value);
      if (pointer != nullptr && pointer->allocation_id == mapped.allocation_id) {
        CHECK(pointer->offset == 0);
        launched_on_mapped = true;
      }
    }
  }
  CHECK(launched_on_mapped);
}

TEST_CASE("a stream capture is recorded as graph structure and each graph launch as one op",
          "[tracer][driver]") {
  const Recording r = RecordStreamsGraphs("graphs");
  const std::vector<OpRecord> begin = Named(r.ops, "cuStreamBeginCapture_v2");
  const std::vector<OpRecord> end = Named(r.ops, "cuStreamEndCapture");
  REQUIRE(begin.size() == 1);
  REQUIRE(end.size() == 1);
  const std::optional<uint64_t> graph = UnsignedArg(begin[0], "graph");
  REQUIRE(graph == 1u);
  CHECK(UnsignedArg(end[0], "graph") == graph);
  // Captured between them: 2 launches (on high and, forked, on low), 2 records and 2 waits.
  std::vector<OpRecord> captured;
  for (const OpRecord& op : r.ops) {
    if (UnsignedArg(op, "capturedInto") == graph) captured.push_back(op);
  }
  REQUIRE(captured.size() == 6);
  CHECK(UnsignedArg(end[0], "capturedOps") == 6u);
  std::set<uint32_t> captured_streams;
  size_t captured_launches = 0;
  for (const OpRecord& op : captured) {
    captured_streams.insert(op.stream_id);
    if (op.kind == OpKind::kKernelLaunch) ++captured_launches;
    CHECK(op.sequence > begin[0].sequence);
    CHECK(op.sequence < end[0].sequence);
    CHECK(op.outputs.empty());
  }
  CHECK(captured_launches == 2);
  CHECK(captured_streams == std::set<uint32_t>{1, 2});

  const std::vector<OpRecord> instantiate = Named(r.ops, "cuGraphInstantiateWithFlags");
  REQUIRE(instantiate.size() == 1);
  CHECK(UnsignedArg(instantiate[0], "graph") == graph);
  CHECK(UnsignedArg(instantiate[0], "graphExec") == 1u);
  CHECK(UnsignedArg(instantiate[0], "nodes") == 2u);  // the stand-in's graph: two kernel nodes
  const std::vector<OpRecord> launches = Named(r.ops, "cuGraphLaunch");
  REQUIRE(launches.size() == 3);  // the default iteration count
  for (const OpRecord& op : launches) {
    CHECK(op.kind == OpKind::kGraphLaunch);
    CHECK(op.stream_id == 1);
    CHECK(UnsignedArg(op, "graphExec") == 1u);
    CHECK(UnsignedArg(op, "graph") == graph);
    CHECK(UnsignedArg(op, "nodes") == 2u);
  }
  CHECK(Named(r.ops, "cuGraphExecDestroy").size() == 1);
  CHECK(Named(r.ops, "cuGraphDestroy").size() == 1);
}

TEST_CASE("a driver the program dlopens RTLD_LOCAL itself is traced through its lookups",
          "[tracer][driver]") {
  const Recording r = RecordStreamsGraphs("dlopen");
  // The last stream: created with cuStreamCreate from the program's own cuGetProcAddress_v2.
  const std::vector<OpRecord> late = Named(r.ops, "cuStreamCreate");
  REQUIRE(late.size() == 1);
  CHECK(late[0].status == 0);
  bool destroyed = false;
  for (const OpRecord& op : Named(r.ops, "cuStreamDestroy_v2")) {
    destroyed = destroyed || (op.stream_id == late[0].stream_id && op.sequence > late[0].sequence);
  }
  CHECK(destroyed);
}

TEST_CASE("two recordings of streams_graphs give identical op streams and digests",
          "[tracer][driver]") {
  const Recording first = RecordStreamsGraphs("first");
  const Recording second = RecordStreamsGraphs("second");
  REQUIRE(first.ops.size() == second.ops.size());
  for (size_t i = 0; i < first.ops.size(); ++i) {
    INFO("op " << i << " " << first.ops[i].name);
    CHECK(Masked(first.ops[i]) == Masked(second.ops[i]));
  }
}

}  // namespace
}  // namespace ndt::test
