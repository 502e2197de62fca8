// End-to-end tests of the NCCL hooks: tests/programs/allreduce (4 ranks in one process, one
// thread driving them through ncclGroupStart/End) under `ndtrace record` and `check` on the
// stand-in device (stand-in libnccl.so.2: racing reduction order unless NCCL_ALGO=Ring).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::format::Record;

const std::string kProgram = PROG_ALLREDUCE;

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
    if (const auto* decision = std::get_if<ndt::format::PolicyDecisionRecord>(&record)) {
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

}  // namespace
