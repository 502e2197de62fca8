// End-to-end tests of the NCCL hooks and of --pin for NCCL: tests/programs/allreduce (ranks in
// one process, one thread driving them through ncclGroupStart/End; --ops picks the calls) under
// `ndtrace record`, `check` and `run` on the stand-in device (stand-in libnccl.so.2: racing
// reduction order unless NCCL_ALGO=Ring, exact data movement).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "formats/trace_writer.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::Digest;
using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::format::PolicyDecisionRecord;
using ndt::format::Record;

const std::string kProgram = PROG_ALLREDUCE;
constexpr uint64_t kBlock = 65536 * sizeof(float);  // the program's count of floats

std::vector<OpRecord> Collectives(const std::vector<OpRecord>& ops) {
  std::vector<OpRecord> collectives;
  for (const OpRecord& op : ops) {
    if (op.kind == OpKind::kNcclCollective) collectives.push_back(op);
  }
  return collectives;
}

const Argument* Arg(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

template <typename T>
T ArgAs(const OpRecord& op, const std::string& name) {
  const Argument* argument = Arg(op, name);
  REQUIRE(argument != nullptr);
  REQUIRE(std::holds_alternative<T>(argument->value));
  return std::get<T>(argument->value);
}

std::vector<PolicyDecisionRecord> NcclDecisions(const std::vector<Record>& records) {
  std::vector<PolicyDecisionRecord> decisions;
  for (const Record& record : records) {
    const auto* decision = std::get_if<PolicyDecisionRecord>(&record);
    if (decision != nullptr && decision->library == "nccl") decisions.push_back(*decision);
  }
  return decisions;
}

// The value of `name` in the trace header's environment, or "(unset)".
std::string HeaderVariable(const std::string& trace, const std::string& name) {
  auto reader = ndt::format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  for (const auto& variable : (*reader)->header().environment) {
    if (variable.name == name) return variable.value;
  }
  return "(unset)";
}

// The receive digests of the program's ncclReduceScatter calls, rank by rank.
std::vector<Digest> ReduceScatterOutputs(const std::string& trace) {
  std::vector<Digest> outputs;
  for (const OpRecord& op : Collectives(Ops(ReadAll(trace)))) {
    if (op.name != "ncclReduceScatter") continue;
    REQUIRE(op.outputs.size() == 1);
    outputs.push_back(op.outputs[0].digest);
  }
  REQUIRE(outputs.size() == 4);
  return outputs;
}

int CountLines(const std::string& text, const std::string& needle) {
  int count = 0;
  for (const std::string& line : Lines(text)) count += Contains(line, needle);
  return count;
}

// `ndtrace record` of the program with NCCL_ALGO unset, or set to `algo`.
RunResult RecordWithAlgo(const std::string& trace, const std::string& algo,
                         const std::string& options, const std::string& args) {
  std::remove(trace.c_str());
  const std::string environment =
      algo.empty() ? "env -u NCCL_ALGO " : "env NCCL_ALGO=" + algo + " ";
  return Run(environment + "'" NDTRACE_BIN "' record " + options + " -o '" + trace + "' -- '" +
             kProgram + "' " + args);
}

const std::string kReduceScatter = "--ranks 4 --ops reducescatter";

TEST_CASE("recording allreduce gives each rank's collective its communicator, shape and digests",
          "[tracer][nccl]") {
  const std::string trace = TempPath("nccl_observe.ndt");
  const RunResult run = RecordRun(trace, kProgram + "' '--ranks' '4", "");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const std::vector<OpRecord> collectives = Collectives(Ops(ReadAll(trace)));
  REQUIRE(collectives.size() == 4);
  for (size_t r = 0; r < collectives.size(); ++r) {
    const OpRecord& op = collectives[r];
    INFO("rank " << r);
    CHECK(op.name == "ncclAllReduce");
    CHECK(ArgAs<uint64_t>(op, "comm") == r + 1);
    CHECK(ArgAs<int64_t>(op, "rank") == static_cast<int64_t>(r));
    CHECK(ArgAs<int64_t>(op, "nranks") == 4);
    CHECK(ArgAs<std::string>(op, "op") == "sum");
    CHECK(ArgAs<std::string>(op, "dtype") == "float32");
    CHECK(ArgAs<uint64_t>(op, "count") == 65536);
    CHECK(ArgAs<int64_t>(op, "groupDepth") == 1);
    CHECK(ArgAs<std::string>(op, "fingerprint") ==
          "nccl allreduce comm " + std::to_string(r + 1) + " rank " + std::to_string(r) +
              "/4 sum float32 count=65536");
    REQUIRE(op.algorithm.has_value());
    CHECK(op.algorithm->library == "nccl");
    REQUIRE(op.inputs.size() == 1);
    CHECK(op.inputs[0].role == "sendbuff");
    CHECK(op.inputs[0].bytes == 65536 * sizeof(float));
    REQUIRE(op.outputs.size() == 1);
    CHECK(op.outputs[0].role == "recvbuff");
    // Every rank receives the same sum of different contributions.
    CHECK(op.outputs[0].digest == collectives[0].outputs[0].digest);
    if (r > 0) CHECK(op.inputs[0].digest != collectives[0].inputs[0].digest);
  }
  std::remove(trace.c_str());
}

TEST_CASE("ndtrace check finds allreduce's racing reduction order nondeterministic",
          "[tracer][nccl]") {
  const std::string dir = TempPath("nccl_check_racing");
  // The race makes two runs differ with overwhelming probability; up to 3 tries until they do.
  RunResult check;
  for (int attempt = 0; attempt < 3 && check.status != 1; ++attempt) {
    check = Run("'" NDTRACE_BIN "' check -n 2 -o '" + dir + "' -- '" + kProgram +
                "' --ranks 4");
  }
  INFO(check.out << check.err);
  CHECK(check.status == 1);
  CHECK_THAT(check.out, Catch::Contains("error[nondeterministic_op]") &&
                            Catch::Contains("ncclAllReduce") &&
                            Catch::Contains("NCCL_ALGO=(unset)"));
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("the deterministic policy pins NCCL_ALGO=Ring and makes allreduce reproducible",
          "[tracer][nccl]") {
  const std::string dir = TempPath("nccl_check_ring");
  const RunResult check = Run("'" NDTRACE_BIN "' check --deterministic -n 3 -o '" + dir +
                              "' -- '" + kProgram + "' --ranks 4 2");
  INFO(check.out << check.err);
  CHECK(check.status == 0);

  const std::string trace = TempPath("nccl_ring.ndt");
  const RunResult run = RecordRun(trace, kProgram + "' '--ranks' '4", "--deterministic");
  INFO(run.err);
  REQUIRE(run.status == 0);
  auto reader = ndt::format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  bool ring_in_header = false;
  for (const auto& variable : (*reader)->header().environment) {
    ring_in_header = ring_in_header || (variable.name == "NCCL_ALGO" && variable.value == "Ring");
  }
  CHECK(ring_in_header);
  const std::vector<Record> records = ReadAll(trace);
  bool set_ring = false;
  for (const Record& record : records) {
    if (const auto* decision = std::get_if<PolicyDecisionRecord>(&record)) {
      set_ring = set_ring || (decision->library == "nccl" &&
                              decision->action == "set NCCL_ALGO=Ring" && decision->applied);
    }
  }
  CHECK(set_ring);
  const std::vector<OpRecord> collectives = Collectives(Ops(records));
  REQUIRE(collectives.size() == 4);
  for (const OpRecord& op : collectives) {
    REQUIRE(op.algorithm.has_value());
    CHECK(op.algorithm->id == 1);  // NCCL's ring
    CHECK(op.algorithm->name == "NCCL_ALGO=Ring NCCL_PROTO=Simple");
    CHECK(op.algorithm->source == ndt::format::ChoiceSource::kEnforced);
    CHECK(op.algorithm->determinism == ndt::format::Determinism::kDeterministic);
  }
  std::remove(trace.c_str());
  std::system(("rm -rf '" + dir + "'").c_str());
}

// What each call reads and writes on rank r of 3 (root 2), in blocks of the call's count.
struct Expected {
  const char* api;
  const char* kind;
  const char* reduction;  // null: none
  bool rooted;
  const char* send_role;
  const char* recv_role;
  uint64_t send_blocks;  // 0: the rank does not read a send buffer
  uint64_t recv_blocks;  // 0: the rank does not write a receive buffer
};

std::vector<Expected> ExpectedCalls(int r) {
  const bool root = r == 2;
  return {
      {"ncclAllReduce", "allreduce", "sum", false, "sendbuff", "recvbuff", 1, 1},
      {"ncclReduceScatter", "reducescatter", "sum", false, "sendbuff", "recvbuff", 3, 1},
      {"ncclReduce", "reduce", "sum", true, "sendbuff", "recvbuff", 1, root ? 1u : 0u},
      {"ncclAllGather", "allgather", nullptr, false, "sendbuff", "recvbuff", 1, 3},
      {"ncclBroadcast", "broadcast", nullptr, true, "sendbuff", "recvbuff", root ? 1u : 0u, 1},
      {"ncclBcast", "bcast", nullptr, true, "buff", "buff", root ? 1u : 0u, 1},
      {"ncclAlltoAll", "alltoall", nullptr, false, "sendbuff", "recvbuff", 3, 3},
      {"ncclGather", "gather", nullptr, true, "sendbuff", "recvbuff", 1, root ? 3u : 0u},
      {"ncclScatter", "scatter", nullptr, true, "sendbuff", "recvbuff", root ? 3u : 0u, 1},
      {"ncclSend", "send", nullptr, false, "sendbuff", "recvbuff", 1, 0},
      {"ncclRecv", "recv", nullptr, false, "sendbuff", "recvbuff", 0, 1},
  };
}

// The op of `api` made by rank `r`.
const OpRecord& CallOf(const std::vector<OpRecord>& ops, const std::string& api, int r) {
  for (const OpRecord& op : ops) {
    if (op.name == api && ArgAs<int64_t>(op, "rank") == r) return op;
  }
  FAIL("no " << api << " by rank " << r);
  return ops.front();
}

TEST_CASE("every NCCL collective and point-to-point call is recorded with its exact extents",
          "[tracer][nccl]") {
  const std::string trace = TempPath("nccl_every_call.ndt");
  const RunResult run = RecordRun(trace, kProgram + "' '--ranks' '3' '--ops' 'all", "");
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  CHECK(Contains(run.out, "checksum "));
  const std::vector<OpRecord> ops = Collectives(Ops(ReadAll(trace)));
  REQUIRE(ops.size() == 3 * 11);

  for (int r = 0; r < 3; ++r) {
    for (const Expected& expected : ExpectedCalls(r)) {
      INFO(expected.api << " rank " << r);
      const OpRecord& op = CallOf(ops, expected.api, r);
      CHECK(ArgAs<uint64_t>(op, "comm") == static_cast<uint64_t>(r + 1));
      CHECK(ArgAs<int64_t>(op, "nranks") == 3);
      CHECK(ArgAs<uint64_t>(op, "count") == 65536);
      CHECK(ArgAs<std::string>(op, "dtype") == "float32");
      CHECK(ArgAs<int64_t>(op, "groupDepth") == 1);
      std::string fingerprint = std::string("nccl ") + expected.kind + " comm " +
                                std::to_string(r + 1) + " rank " + std::to_string(r) + "/3 " +
                                (expected.reduction ? std::string(expected.reduction) + " " : "") +
                                "float32 count=65536";
      if (expected.reduction != nullptr) {
        CHECK(ArgAs<std::string>(op, "op") == expected.reduction);
      } else {
        CHECK(Arg(op, "op") == nullptr);
      }
      if (expected.rooted) {
        CHECK(ArgAs<int64_t>(op, "root") == 2);
        fingerprint += " root=2";
      } else {
        CHECK(Arg(op, "root") == nullptr);
      }
      const std::string api = expected.api;
      if (api == "ncclSend" || api == "ncclRecv") {
        const int peer = api == "ncclSend" ? (r + 1) % 3 : (r + 2) % 3;
        CHECK(ArgAs<int64_t>(op, "peer") == peer);
        fingerprint += " peer=" + std::to_string(peer);
      } else {
        CHECK(Arg(op, "peer") == nullptr);
      }
      CHECK(ArgAs<std::string>(op, "fingerprint") == fingerprint);
      REQUIRE(op.algorithm.has_value());
      CHECK(op.algorithm->library == "nccl");
      // The send extent is digested before the call, the receive extent after it; a buffer the
      // rank does not use is neither an argument nor digested.
      if (expected.send_blocks > 0) {
        REQUIRE(op.inputs.size() == 1);
        CHECK(op.inputs[0].role == expected.send_role);
        CHECK(op.inputs[0].bytes == expected.send_blocks * kBlock);
        CHECK(Arg(op, expected.send_role) != nullptr);
      } else {
        CHECK(op.inputs.empty());
      }
      if (expected.recv_blocks > 0) {
        REQUIRE(op.outputs.size() == 1);
        CHECK(op.outputs[0].role == expected.recv_role);
        CHECK(op.outputs[0].bytes == expected.recv_blocks * kBlock);
        CHECK(Arg(op, expected.recv_role) != nullptr);
      } else {
        CHECK(op.outputs.empty());
      }
      if (expected.send_blocks == 0 && std::string(expected.send_role) != expected.recv_role) {
        CHECK(Arg(op, expected.send_role) == nullptr);
      }
      if (expected.recv_blocks == 0) CHECK(Arg(op, expected.recv_role) == nullptr);
    }
  }

  // What was received is what was sent.
  const auto in = [&](const char* api, int r) { return CallOf(ops, api, r).inputs.at(0).digest; };
  const auto out = [&](const char* api, int r) { return CallOf(ops, api, r).outputs.at(0).digest; };
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(out("ncclAllGather", r) == out("ncclAllGather", 0));
    CHECK(out("ncclBroadcast", r) == in("ncclBroadcast", 2));
    CHECK(out("ncclBcast", r) == in("ncclBcast", 2));
    CHECK(out("ncclRecv", r) == in("ncclSend", (r + 2) % 3));
    if (r > 0) CHECK(out("ncclAlltoAll", r) != out("ncclAlltoAll", 0));
  }
  CHECK(out("ncclGather", 2) == out("ncclAllGather", 0));
  std::remove(trace.c_str());
}

TEST_CASE("ndtrace check names reduce-scatter's racing order, which --deterministic fixes",
          "[tracer][nccl]") {
  const std::string dir = TempPath("nccl_check_reducescatter");
  // The race makes two runs differ with overwhelming probability; up to 3 tries until they do.
  RunResult check;
  for (int attempt = 0; attempt < 3 && check.status != 1; ++attempt) {
    check = Run("'" NDTRACE_BIN "' check -n 2 -o '" + dir + "' -- '" + kProgram + "' " +
                kReduceScatter);
  }
  INFO(check.out << check.err);
  CHECK(check.status == 1);
  CHECK_THAT(check.out, Catch::Contains("error[nondeterministic_op]") &&
                            Catch::Contains("ncclReduceScatter"));

  const RunResult deterministic = Run("'" NDTRACE_BIN "' check --deterministic -n 3 -o '" + dir +
                                      "' -- '" + kProgram + "' " + kReduceScatter);
  INFO(deterministic.out << deterministic.err);
  CHECK(deterministic.status == 0);
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("pinning to a reference recorded with NCCL_ALGO=Ring reproduces it without it",
          "[tracer][nccl]") {
  const std::string reference = TempPath("nccl_pin_reference.ndt");
  const RunResult recorded = RecordWithAlgo(reference, "Ring", "", kReduceScatter);
  INFO(recorded.out << recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<Digest> expected = ReduceScatterOutputs(reference);

  const std::string pinned = TempPath("nccl_pinned.ndt");
  for (int run = 0; run < 2; ++run) {
    const RunResult result =
        RecordWithAlgo(pinned, "", "--pin '" + reference + "'", kReduceScatter);
    INFO(result.out << result.err);
    REQUIRE(result.status == 0);
    CHECK(result.out == recorded.out);  // the program's own checksum
    CHECK(ReduceScatterOutputs(pinned) == expected);
    CHECK(HeaderVariable(pinned, "NCCL_ALGO") == "Ring");
    const std::vector<Record> records = ReadAll(pinned);
    const std::vector<PolicyDecisionRecord> decisions = NcclDecisions(records);
    REQUIRE(decisions.size() == 1);
    CHECK(decisions[0].action == "set NCCL_ALGO=Ring (pinned from the reference)");
    CHECK(decisions[0].applied);
    for (const OpRecord& op : Collectives(Ops(records))) {
      CHECK(op.algorithm->name == "NCCL_ALGO=Ring NCCL_PROTO=(unset)");
      CHECK(op.algorithm->source == ndt::format::ChoiceSource::kPinned);
    }
  }

  const RunResult run = Run("env -u NCCL_ALGO '" NDTRACE_BIN "' run --pin '" + reference +
                            "' -- '" + kProgram + "' " + kReduceScatter);
  INFO(run.out << run.err);
  CHECK(run.status == 0);
  CHECK(run.out == recorded.out);
  CHECK(Contains(run.err, "policy op 0: set NCCL_ALGO=Ring (pinned from the reference) [nccl]"));

  // Without the pin the same program's results vary (up to 3 tries until two runs differ).
  const std::string unpinned = TempPath("nccl_unpinned.ndt");
  bool varied = false;
  for (int attempt = 0; attempt < 3 && !varied; ++attempt) {
    REQUIRE(RecordWithAlgo(unpinned, "", "", kReduceScatter).status == 0);
    const std::vector<Digest> first = ReduceScatterOutputs(unpinned);
    REQUIRE(RecordWithAlgo(unpinned, "", "", kReduceScatter).status == 0);
    varied = ReduceScatterOutputs(unpinned) != first;
  }
  CHECK(varied);
  std::remove(reference.c_str());
  std::remove(pinned.c_str());
  std::remove(unpinned.c_str());
}

TEST_CASE("pinning says once that NCCL's choice cannot be pinned and the program runs on",
          "[tracer][nccl]") {
  const std::string reference = TempPath("nccl_unpinnable_reference.ndt");
  const std::string trace = TempPath("nccl_unpinnable.ndt");
  const std::string args = "--ranks 4 --ops reducescatter,allreduce 2";

  SECTION("the reference left NCCL_ALGO unset") {
    REQUIRE(RecordWithAlgo(reference, "", "", kReduceScatter).status == 0);
    const RunResult result = RecordWithAlgo(trace, "", "--pin '" + reference + "'", args);
    INFO(result.out << result.err);
    CHECK(result.status == 0);
    CHECK(CountLines(result.out, "checksum ") == 1);
    CHECK(CountLines(result.err,
                     "cannot pin NCCL's algorithm: the reference left NCCL_ALGO "
                     "unset") == 1);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<PolicyDecisionRecord> decisions = NcclDecisions(records);
    REQUIRE(decisions.size() == 1);
    CHECK_FALSE(decisions[0].applied);
    CHECK(HeaderVariable(trace, "NCCL_ALGO") == "(unset)");
    CHECK(Collectives(Ops(records)).size() == 4 * 2 * 2);

    const RunResult run = Run("env -u NCCL_ALGO '" NDTRACE_BIN "' run --pin '" + reference +
                              "' -- '" + kProgram + "' " + args);
    INFO(run.out << run.err);
    CHECK(run.status == 0);
    CHECK(CountLines(run.out, "checksum ") == 1);
    CHECK(Contains(run.err, "1 policy decision (1 not applied)"));
  }
  SECTION("the program sets NCCL_ALGO itself, to another value") {
    REQUIRE(RecordWithAlgo(reference, "Ring", "", kReduceScatter).status == 0);
    const RunResult result = RecordWithAlgo(trace, "Tree", "--pin '" + reference + "'", args);
    INFO(result.out << result.err);
    CHECK(result.status == 0);
    CHECK(CountLines(result.err,
                     "kept NCCL_ALGO=Tree from the program's environment; the "
                     "reference ran with NCCL_ALGO=Ring") == 1);
    CHECK(HeaderVariable(trace, "NCCL_ALGO") == "Tree");
    const std::vector<PolicyDecisionRecord> decisions = NcclDecisions(ReadAll(trace));
    REQUIRE(decisions.size() == 1);
    CHECK_FALSE(decisions[0].applied);
  }
  SECTION("the reference ran another NCCL version") {
    ndt::format::TraceHeader header;
    header.versions.nccl = 21903;
    header.environment.push_back({"NCCL_ALGO", "Ring"});
    {
      auto writer = ndt::format::TraceWriter::Create(reference, header);
      REQUIRE(writer.ok());
      REQUIRE((*writer)->Close().ok());
    }
    const RunResult result = RecordWithAlgo(trace, "", "--pin '" + reference + "'", args);
    INFO(result.out << result.err);
    CHECK(result.status == 0);
    CHECK(CountLines(result.err, "may not reproduce its choices: the reference used NCCL 21903") ==
          1);
    const std::vector<PolicyDecisionRecord> decisions = NcclDecisions(ReadAll(trace));
    REQUIRE(decisions.size() == 2);
    CHECK(decisions[0].applied);  // NCCL_ALGO=Ring is still set
    CHECK_FALSE(decisions[1].applied);
    CHECK(HeaderVariable(trace, "NCCL_ALGO") == "Ring");
  }
  std::remove(reference.c_str());
  std::remove(trace.c_str());
}

}  // namespace
