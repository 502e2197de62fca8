// NDTRACE_PYTHON_STACK: the tracer takes the Python stack of exactly the ops asked for by their
// place in a lane (formats/README.md "Lanes"), in a real CPython driving the stand-in through
// ctypes from several threads; a program without CPython says so; a malformed request is said
// and ignored.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
using ndt::format::PythonStackRecord;
using ndt::format::PythonStackStatus;

using Place = std::tuple<uint32_t, uint32_t, uint64_t>;  // thread, stream ordinal, index

// Every op's place, by the definition in formats/README.md "Lanes" (written out here, apart
// from the tracer's and the replayer's code, so that all three are checked against it).
std::map<uint64_t, Place> Places(const std::vector<OpRecord>& ops) {
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> ordinal;
  std::map<uint32_t, uint32_t> streams;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> count;
  std::map<uint64_t, Place> places;
  for (const OpRecord& op : ops) {
    if (ndt::format::IsLifecycleOp(op)) continue;
    auto [it, added] = ordinal.try_emplace({op.thread_id, op.stream_id}, 0);
    if (added) it->second = streams[op.thread_id]++;
    places[op.sequence] = {op.thread_id, it->second, count[{op.thread_id, it->second}]++};
  }
  return places;
}

// Every top-level op's position among its lane's ops made from inside no other op (no
// "insideOp"), by the same definition (tracer/README.md "Python stacks").
std::map<uint64_t, Place> TopPlaces(const std::vector<OpRecord>& ops) {
  std::map<uint64_t, Place> places = Places(ops);
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> count;
  std::map<uint64_t, Place> top;
  for (const OpRecord& op : ops) {
    if (!places.count(op.sequence)) continue;
    const bool inside = std::any_of(op.args.begin(), op.args.end(), [](const auto& argument) {
      return argument.name == "insideOp";
    });
    if (inside) continue;
    const auto [thread, stream, index] = places.at(op.sequence);
    top[op.sequence] = {thread, stream, count[{thread, stream}]++};
  }
  return top;
}

// The ops in file order (a nested op, e.g. a synchronisation inside a library call, is written
// before the op that contains it; lanes count ops in that order).
std::vector<OpRecord> FileOps(const std::vector<Record>& records) {
  std::vector<OpRecord> ops;
  for (const Record& record : records) {
    if (const auto* op = std::get_if<OpRecord>(&record)) ops.push_back(*op);
  }
  return ops;
}

// NDTRACE_PYTHON_STACK for `wanted`'s places, each index written after `index_prefix` ("t":
// top-level places).
std::string Request(const std::map<Place, std::string>& wanted, const std::string& index_prefix) {
  std::string request;
  for (const auto& [place, name] : wanted) {
    request += (request.empty() ? "" : ",") + std::to_string(std::get<0>(place)) + ":" +
               std::to_string(std::get<1>(place)) + ":" + index_prefix +
               std::to_string(std::get<2>(place));
  }
  return request;
}

std::string Python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

const std::string kScript = NDT_TEST_DATA_DIR "/../corpus/python_threads.py";

RunResult RecordPython(const std::string& trace, const std::string& request) {
  std::remove(trace.c_str());
  return Run((request.empty() ? "" : "NDTRACE_PYTHON_STACK='" + request + "' ") +
             "NDT_STANDIN_ASYNC=1 '" NDTRACE_BIN "' record -o '" + trace + "' -- " + Python() +
             " '" + kScript + "'");
}

}  // namespace

TEST_CASE("the tracer takes the Python stack of exactly the ops asked for by lane place",
          "[tracer][python]") {
  ndt::testing::TempDir dir;
  const std::string first = dir / "first.ndt";
  const RunResult plain = RecordPython(first, "");
  INFO(plain.out << plain.err);
  REQUIRE(plain.status == 0);
  const auto first_records = ReadAll(first);
  auto reader = ndt::format::TraceReader::Open(first);
  REQUIRE(reader.ok());
  CHECK_FALSE((*reader)->header().python.empty());  // the CPython version
  const std::vector<OpRecord> first_ops = FileOps(first_records);
  const std::map<uint64_t, Place> first_places = Places(first_ops);

  // Ask for each worker thread's third GEMM (the main thread issues no op).
  std::map<Place, std::string> wanted;  // place -> op name
  std::map<uint32_t, int> gemms;
  for (const OpRecord& op : first_ops) {
    if (!first_places.count(op.sequence)) continue;
    const Place& place = first_places.at(op.sequence);
    if (op.name == "cublasSgemm_v2" && ++gemms[op.thread_id] == 3) wanted[place] = op.name;
  }
  REQUIRE(gemms.size() == 3);
  REQUIRE(wanted.size() == 3);
  const std::string request = Request(wanted, "");

  const std::string second = dir / "second.ndt";
  const RunResult asked = RecordPython(second, request);
  INFO(request << "\n" << asked.out << asked.err);
  REQUIRE(asked.status == 0);
  CHECK(asked.out == plain.out);  // the program's output is unchanged
  const auto records = ReadAll(second);
  const std::vector<OpRecord> ops = FileOps(records);
  const std::map<uint64_t, Place> places = Places(ops);
  std::map<uint64_t, std::string> names;
  for (const OpRecord& op : ops) names[op.sequence] = op.name;
  std::set<Place> seen;
  for (const auto& record : records) {
    const auto* stack = std::get_if<PythonStackRecord>(&record);
    if (stack == nullptr) continue;
    INFO("python stack of op " << stack->op_sequence << ": "
                               << ndt::format::PythonStackSummary(*stack));
    REQUIRE(places.count(stack->op_sequence) == 1);
    const Place place = places.at(stack->op_sequence);
    CHECK(place == Place{stack->thread_id, stack->lane_stream, stack->lane_index});
    REQUIRE(wanted.count(place) == 1);
    CHECK(names.at(stack->op_sequence) == wanted.at(place));
    CHECK(seen.insert(place).second);
    REQUIRE(stack->status == PythonStackStatus::kCaptured);
    REQUIRE_FALSE(stack->frames.empty());
    CHECK_THAT(stack->frames.front().file, Catch::EndsWith("python_threads.py"));
    CHECK(stack->frames.front().line > 0);
    CHECK(stack->frames.front().function == "run");  // the worker threads' function
  }
  CHECK(seen.size() == wanted.size());
}

TEST_CASE("the tracer takes the Python stack of the op at a top-level place", "[tracer][python]") {
  ndt::testing::TempDir dir;
  const std::string first = dir / "first.ndt";
  const RunResult plain = RecordPython(first, "");
  INFO(plain.out << plain.err);
  REQUIRE(plain.status == 0);
  const std::vector<OpRecord> first_ops = FileOps(ReadAll(first));
  const std::map<uint64_t, Place> all = Places(first_ops);
  const std::map<uint64_t, Place> top = TopPlaces(first_ops);
  // Each worker's fourth GEMM: cuBLAS launched a kernel inside each earlier one, so its
  // top-level position is not its position in the lane.
  std::map<Place, std::string> wanted;  // top-level place -> op name
  std::map<uint32_t, int> gemms;
  for (const OpRecord& op : first_ops) {
    if (op.name != "cublasSgemm_v2" || ++gemms[op.thread_id] != 4) continue;
    REQUIRE(top.count(op.sequence) == 1);
    CHECK(std::get<2>(top.at(op.sequence)) < std::get<2>(all.at(op.sequence)));
    wanted[top.at(op.sequence)] = op.name;
  }
  REQUIRE(wanted.size() == 3);
  const std::string request = Request(wanted, "t");
  const std::string second = dir / "second.ndt";
  const RunResult asked = RecordPython(second, request);
  INFO(request << "\n" << asked.out << asked.err);
  REQUIRE(asked.status == 0);
  const auto records = ReadAll(second);
  const std::map<uint64_t, Place> top_places = TopPlaces(FileOps(records));
  std::set<Place> seen;
  for (const auto& record : records) {
    const auto* stack = std::get_if<PythonStackRecord>(&record);
    if (stack == nullptr) continue;
    REQUIRE(top_places.count(stack->op_sequence) == 1);
    const Place place = top_places.at(stack->op_sequence);
    REQUIRE(wanted.count(place) == 1);
    CHECK(seen.insert(place).second);
    CHECK(stack->status == PythonStackStatus::kCaptured);
  }
  CHECK(seen.size() == wanted.size());
}

TEST_CASE("a program without CPython gets no Python stack, said as such", "[tracer][python]") {
  ndt::testing::TempDir dir;
  const std::string trace = dir / "native.ndt";
  std::remove(trace.c_str());
  const RunResult result = Run("NDTRACE_PYTHON_STACK=0:0:0 '" NDTRACE_BIN "' record -o '" + trace +
                               "' -- '" PROG_VECTOR_ADD "'");
  INFO(result.out << result.err);
  REQUIRE(result.status == 0);
  auto reader = ndt::format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  CHECK((*reader)->header().python.empty());
  int stacks = 0;
  for (const auto& record : ReadAll(trace)) {
    if (const auto* stack = std::get_if<PythonStackRecord>(&record)) {
      ++stacks;
      CHECK(stack->status == PythonStackStatus::kNoPython);
      CHECK(stack->frames.empty());
      CHECK(stack->lane_index == 0);
    }
  }
  CHECK(stacks == 1);
}

TEST_CASE("a malformed NDTRACE_PYTHON_STACK is said once and takes no stack", "[tracer][python]") {
  ndt::testing::TempDir dir;
  const std::string trace = dir / "bad.ndt";
  for (const char* request :
       {"1:2", "a:b:c", "1:2:3,", "-1:0:0", "1:2:3:4", "1:2:t", "1:2:tt3", "1:2:x3", "1:t2:3"}) {
    std::remove(trace.c_str());
    const RunResult result =
        Run(std::string("NDTRACE_PYTHON_STACK='") + request + "' '" NDTRACE_BIN "' record -o '" +
            trace + "' -- '" PROG_VECTOR_ADD "'");
    INFO(request << "\n" << result.out << result.err);
    CHECK(result.status == 0);
    CHECK_THAT(result.err, Catch::Contains(std::string("NDTRACE_PYTHON_STACK=") + request +
                                           ": expected THREAD:STREAM:INDEX"));
    for (const auto& record : ReadAll(trace))
      CHECK_FALSE(std::holds_alternative<PythonStackRecord>(record));
  }
}
