// Standalone replay of raw kernel launches end to end on the stand-in device: `ndtrace record
// --capture kernel:GLOB` stores a launch's module image, argument bytes and the whole
// allocations it references; `ndtrace replay TRACE --op N` re-creates those allocations at
// their recorded device addresses and re-runs the launch alone: racy_sum's atomicAdd kernel
// varies, vector_add's does not and reproduces the recorded output, pointer_rows' pointers held
// in device memory stay valid, and a range that cannot be reserved is refused. Exit codes: 0
// stable, 1 varies, 2 error. Stand-in results only.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/records.h"
#include "support/captured_trace.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
using ndt::format::AllocationRecord;
using ndt::format::OpKind;

const std::string kNdtrace = "'" NDTRACE_BIN "'";

RunResult RecordCapture(const std::string& trace, const std::string& capture,
                        const std::string& program) {
  std::remove(trace.c_str());
  return Run(kNdtrace + " record --capture '" + capture + "' -o '" + trace + "' -- '" + program +
             "'");
}

const Argument* Find(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

// The only launch of `name` in `records`.
OpRecord Launch(const std::vector<Record>& records, const std::string& name) {
  std::vector<OpRecord> found;
  for (const OpRecord& op : Ops(records)) {
    if (op.kind == OpKind::kKernelLaunch && Contains(op.name, name)) found.push_back(op);
  }
  REQUIRE(found.size() == 1);
  return found[0];
}

// Every allocation of the trace by id: (raw base address, bytes).
std::map<uint64_t, std::pair<uint64_t, uint64_t>> Allocations(const std::vector<Record>& records) {
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> allocations;
  for (const Record& record : records) {
    const auto* allocation = std::get_if<AllocationRecord>(&record);
    if (allocation == nullptr || allocation->event != ndt::format::AllocationEvent::kAllocate) {
      continue;
    }
    allocations[allocation->allocation_id] = {allocation->raw_address, allocation->bytes};
  }
  return allocations;
}

// The allocations a captured launch names ("alloc<id>"), by id: (recorded base, bytes).
std::map<uint64_t, std::pair<uint64_t, uint64_t>> Captured(const OpRecord& op) {
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> captured;
  for (const Argument& argument : op.args) {
    const auto* pointer = std::get_if<DevicePointer>(&argument.value);
    if (pointer == nullptr || argument.name.rfind("alloc", 0) != 0) continue;
    CHECK(argument.name == "alloc" + std::to_string(pointer->allocation_id));
    CHECK(pointer->offset == 0);
    const Argument* bytes = Find(op, argument.name + ".bytes");
    REQUIRE(bytes != nullptr);
    captured[pointer->allocation_id] = {pointer->raw_address, std::get<uint64_t>(bytes->value)};
  }
  return captured;
}

TEST_CASE(
    "record --capture kernel:GLOB stores the launch's module, arguments and whole "
    "allocations",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "racy.ndt").string();
  const RunResult recorded = RecordCapture(trace, "kernel:*RacySum*", PROG_RACY_SUM);
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<Record> records = ReadAll(trace);
  const OpRecord launch = Launch(records, "RacySum");
  for (const OpRecord& op : Ops(records)) {
    if (op.sequence == launch.sequence) continue;
    for (const Argument& argument : op.args) CHECK(argument.name.rfind("blob:", 0) != 0);
  }
  CHECK(Text(launch, "mangledName") == "_Z7RacySumPKfPfii");
  const std::optional<std::string> module = Text(launch, "blob:module");
  REQUIRE(module);
  const std::string image = BlobBytes(trace, *module);
  REQUIRE(image.size() > 16);
  CHECK(image.substr(0, 4) == std::string("\x50\xed\x55\xba", 4));  // a fat binary

  // values (4 MiB) and sums (16 bytes): whole, at the addresses and sizes the trace allocated,
  // as the pointer arguments name them.
  const auto allocations = Allocations(records);
  const auto captured = Captured(launch);
  REQUIRE(captured.size() == 2);
  for (const char* arg : {"arg0", "arg1"}) {
    const Argument* pointer = Find(launch, arg);
    REQUIRE(pointer != nullptr);
    REQUIRE(std::holds_alternative<DevicePointer>(pointer->value));
    const uint64_t id = std::get<DevicePointer>(pointer->value).allocation_id;
    REQUIRE(captured.contains(id));
    CHECK(captured.at(id) == allocations.at(id));
    const std::string role = "alloc" + std::to_string(id);
    CHECK(BlobBytes(trace, *Text(launch, "blob:in:" + role)).size() == captured.at(id).second);
    CHECK(BlobBytes(trace, *Text(launch, "blob:out:" + role)).size() == captured.at(id).second);
  }
  // The sums were zero before the launch and are not after it; the values did not change.
  const uint64_t sums = std::get<DevicePointer>(Find(launch, "arg1")->value).allocation_id;
  const uint64_t values = std::get<DevicePointer>(Find(launch, "arg0")->value).allocation_id;
  const std::string sums_role = "alloc" + std::to_string(sums);
  CHECK(BlobBytes(trace, *Text(launch, "blob:in:" + sums_role)) == std::string(16, '\0'));
  CHECK(BlobBytes(trace, *Text(launch, "blob:out:" + sums_role)) != std::string(16, '\0'));
  const std::string values_role = "alloc" + std::to_string(values);
  CHECK(Text(launch, "blob:in:" + values_role) == Text(launch, "blob:out:" + values_role));
}

TEST_CASE("replay --op shows that racy_sum's atomicAdd kernel varies on its own",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "racy.ndt").string();
  REQUIRE(RecordCapture(trace, "kernel:*RacySum*", PROG_RACY_SUM).status == 0);
  const OpRecord launch = Launch(ReadAll(trace), "RacySum");
  const RunResult replayed = Replay(trace, launch.sequence, "--repeat 10");
  INFO(replayed.out << replayed.err);
  CHECK(replayed.status == 1);
  CHECK(Contains(replayed.out, "kernel _Z7RacySumPKfPfii grid (256,1,1) block (256,1,1)"));
  CHECK(Contains(replayed.out, "VARIES on its own: 10 runs of RacySum("));

  const RunResult tried = Replay(trace, launch.sequence, "--repeat 3 --try-deterministic");
  INFO(tried.out << tried.err);
  CHECK(tried.status == 1);
  CHECK(Contains(tried.out, "deterministic alternatives with stable output: none"));
  CHECK(Contains(tried.out, "a raw kernel has no deterministic alternative"));
}

TEST_CASE("replay --op of vector_add's kernel is stable and reproduces the recorded output",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "add.ndt").string();
  REQUIRE(RecordCapture(trace, "kernel:VectorAdd*", PROG_VECTOR_ADD).status == 0);
  std::vector<OpRecord> launches;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.kind == OpKind::kKernelLaunch) launches.push_back(op);
  }
  REQUIRE(launches.size() == 2);  // one per stream, each on its half
  for (const OpRecord& launch : launches) {
    const RunResult replayed = Replay(trace, launch.sequence, "--repeat 5");
    INFO(replayed.out << replayed.err);
    CHECK(replayed.status == 0);
    CHECK(Contains(replayed.out, "is stable: 5 runs of VectorAdd("));
    CHECK(Contains(replayed.out, " 5/5 "));  // every run equals the recorded output bitwise
  }
}

TEST_CASE(
    "replay --op re-creates the allocations elsewhere (as a real driver places them) and moves "
    "the pointers held in the arguments and in device memory with them",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "rows.ndt").string();
  const RunResult recorded = RecordCapture(trace, "kernel:GatherRows*", PROG_POINTER_ROWS);
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<Record> records = ReadAll(trace);
  const OpRecord launch = Launch(records, "GatherRows");
  // rows and out are arguments; data is reached only through the pointers inside rows.
  const auto allocations = Allocations(records);
  const auto captured = Captured(launch);
  REQUIRE(allocations.size() == 3);
  CHECK(captured == allocations);

  const RunResult replayed = Replay(trace, launch.sequence, "--repeat 5");
  INFO(replayed.out << replayed.err);
  CHECK(replayed.status == 0);
  CHECK(Contains(replayed.out, "is stable: 5 runs of GatherRows("));
  CHECK(Contains(replayed.out, " 5/5 "));  // the moved table of pointers equals the recorded one
  CHECK(Contains(replayed.out, "allocations re-created elsewhere (alloc"));
  for (const auto& [id, allocation] : allocations) {
    char expected[96];
    std::snprintf(expected, sizeof expected, "alloc%llu at 0x",
                  static_cast<unsigned long long>(id));
    CHECK(Contains(replayed.out, expected));
    std::snprintf(expected, sizeof expected, "(%llu bytes)",
                  static_cast<unsigned long long>(allocation.second));
    CHECK(Contains(replayed.out, expected));
  }
}

TEST_CASE("replay --op of a launch moves an allocation whose recorded range no process can map, "
          "and refuses an uncaptured launch",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "add.ndt").string();
  REQUIRE(RecordCapture(trace, "kernel:VectorAdd*", PROG_VECTOR_ADD).status == 0);
  const std::vector<Record> records = ReadAll(trace);
  uint64_t first = UINT64_MAX;
  for (const OpRecord& op : Ops(records)) {
    if (op.kind == OpKind::kKernelLaunch) first = std::min(first, op.sequence);
  }
  REQUIRE(first != UINT64_MAX);

  // As if recorded at an address in the kernel's half of the address space, which no process
  // can map: the first captured allocation and every pointer argument into it.
  const std::string moved = (dir / "moved.ndt").string();
  RewriteTrace(trace, moved, nullptr, [&](OpRecord* op) {
    if (op->sequence != first) return;
    uint64_t base = 0;
    for (Argument& argument : op->args) {
      auto* pointer = std::get_if<DevicePointer>(&argument.value);
      if (pointer != nullptr && argument.name.rfind("alloc", 0) == 0) {
        base = pointer->raw_address;
        break;
      }
    }
    REQUIRE(base != 0);
    for (Argument& argument : op->args) {
      auto* pointer = std::get_if<DevicePointer>(&argument.value);
      if (pointer != nullptr && pointer->raw_address == base) {
        pointer->raw_address = 0xffff900000000000ull;
      }
    }
  });
  const RunResult relocated = Replay(moved, first, "--repeat 2");
  INFO(relocated.out << relocated.err);
  CHECK(relocated.status == 0);
  CHECK(Contains(relocated.out, "allocations re-created elsewhere (alloc"));
  CHECK(Contains(relocated.out, " from 0xffff900000000000 to 0x"));
  CHECK(Contains(relocated.out, " 2/2 "));

  // The same program recorded without --capture: nothing to replay.
  const std::string plain = (dir / "plain.ndt").string();
  REQUIRE(RecordRun(plain, PROG_VECTOR_ADD).status == 0);
  const RunResult uncaptured = Replay(plain, first);
  CHECK(uncaptured.status == 2);
  CHECK(Contains(uncaptured.err, "was not captured: record it with `ndtrace record --capture"));
}

}  // namespace
