// The policy options of `ndtrace record` and `ndtrace run` (--deterministic, --pin TRACE), end
// to end on the stand-in device with a program that uses no library: what reaches the tracer,
// the header, the load-time environment and the decision records. The library-specific
// decisions are tested with each library (cudnn_*_test.cc, cublas_test.cc, curand_test.cc,
// nccl_test.cc).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
using ndt::format::EnvVar;
using ndt::format::Policy;
using ndt::format::PolicyDecisionRecord;

ndt::format::TraceHeader HeaderOf(const std::string& path) {
  auto reader = ndt::format::TraceReader::Open(path);
  REQUIRE(reader.ok());
  return (*reader)->header();
}

std::vector<PolicyDecisionRecord> Decisions(const std::vector<Record>& records) {
  std::vector<PolicyDecisionRecord> decisions;
  for (const Record& record : records) {
    if (const auto* decision = std::get_if<PolicyDecisionRecord>(&record)) {
      decisions.push_back(*decision);
    }
  }
  return decisions;
}

std::string EnvValue(const ndt::format::TraceHeader& header, const std::string& name) {
  for (const EnvVar& variable : header.environment) {
    if (variable.name == name) return variable.value;
  }
  return "<unset>";
}

const std::string kNdtrace = "'" NDTRACE_BIN "'";
const std::string kVectorAdd = "'" PROG_VECTOR_ADD "'";

}  // namespace

TEST_CASE("record --deterministic sets the deterministic environment the program left unset",
          "[policy]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "det.ndt").string();
  const RunResult plain = Run(kVectorAdd);
  // The user's own CUBLAS_WORKSPACE_CONFIG is kept.
  const RunResult traced = Run("env CUBLAS_WORKSPACE_CONFIG=:16:8 " + kNdtrace +
                               " record --deterministic -o '" + trace + "' -- " + kVectorAdd);
  REQUIRE(traced.status == 0);
  CHECK(traced.out == plain.out);

  const ndt::format::TraceHeader header = HeaderOf(trace);
  CHECK(header.policy == Policy::kEnforce);
  CHECK(EnvValue(header, "CUBLAS_WORKSPACE_CONFIG") == ":16:8");
  CHECK(EnvValue(header, "NCCL_ALGO") == "Ring");
  CHECK(EnvValue(header, "NCCL_NVLS_ENABLE") == "0");

  std::vector<std::string> actions;
  for (const PolicyDecisionRecord& decision : Decisions(ReadAll(trace))) {
    CHECK(decision.applied);
    actions.push_back("[" + decision.library + "] " + decision.action);
  }
  CHECK(std::find(actions.begin(), actions.end(), "[nccl] set NCCL_ALGO=Ring") != actions.end());
  CHECK(std::find(actions.begin(), actions.end(), "[nccl] set NCCL_PROTO=Simple") !=
        actions.end());
  for (const std::string& action : actions) {
    CHECK(action.find("CUBLAS_WORKSPACE_CONFIG") == std::string::npos);
  }

  const RunResult shown = Run(kNdtrace + " show '" + trace + "'");
  CHECK(shown.out.find("policy    enforce") != std::string::npos);
  CHECK(shown.out.find("set NCCL_ALGO=Ring [nccl]") != std::string::npos);
}

TEST_CASE("record without a policy observes and sets nothing", "[policy]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "observe.ndt").string();
  REQUIRE(RecordRun(trace, PROG_VECTOR_ADD).status == 0);
  const ndt::format::TraceHeader header = HeaderOf(trace);
  CHECK(header.policy == Policy::kObserve);
  CHECK(EnvValue(header, "NCCL_ALGO") == "<unset>");
  CHECK(Decisions(ReadAll(trace)).empty());
}

TEST_CASE("record --pin names the reference trace in the header", "[policy]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "reference.ndt").string();
  const std::string pinned = (dir / "pinned.ndt").string();
  REQUIRE(RecordRun(reference, PROG_VECTOR_ADD).status == 0);
  const RunResult run = RecordRun(pinned, PROG_VECTOR_ADD, "--pin '" + reference + "'");
  REQUIRE(run.status == 0);
  const ndt::format::TraceHeader header = HeaderOf(pinned);
  CHECK(header.policy == Policy::kPin);
  CHECK(header.pinned_from == std::filesystem::absolute(reference).string());
  CHECK(header.notes.empty());
  CHECK(NdtraceLines(run.err).size() == 1);  // the summary line only
}

TEST_CASE("policy options are checked before the program runs", "[policy]") {
  ndt::testing::TempDir dir;
  const std::string marker = (dir / "ran").string();
  const std::string program = "sh -c 'touch " + marker + "'";
  SECTION("--deterministic and --pin exclude each other") {
    const RunResult run = Run(kNdtrace + " record --deterministic --pin x.ndt -- " + program);
    CHECK(run.status == 2);
    CHECK(run.err.rfind("error: ", 0) == 0);
  }
  SECTION("an unreadable --pin trace") {
    const std::string garbage = (dir / "garbage.ndt").string();
    std::ofstream(garbage) << "not a trace";
    for (const std::string& command : {std::string("record"), std::string("run"),
                                       std::string("check")}) {
      INFO(command);
      const RunResult run = Run(kNdtrace + " " + command + " --pin '" + garbage + "' -- " + program);
      CHECK(run.status == 2);
      CHECK(run.err.rfind("error: " + command + ": --pin: ", 0) == 0);
    }
  }
  SECTION("run needs a policy") {
    const RunResult run = Run(kNdtrace + " run -- " + program);
    CHECK(run.status == 2);
    CHECK(run.err == "error: run: give a policy: --deterministic or --pin TRACE\n");
  }
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("a pin trace the tracer cannot read is said once and the program runs", "[policy]") {
  // What a user preloading the tracer by hand gets (the CLI checks the trace first).
  ndt::testing::TempDir dir;
  const std::string garbage = (dir / "garbage.ndt").string();
  std::ofstream(garbage) << "not a trace";
  const std::string trace = (dir / "pinned.ndt").string();
  const RunResult plain = Run(kVectorAdd);
  const RunResult run = Run("env LD_PRELOAD='" NDT_TRACER_LIB "' NDTRACE_PIN='" + garbage +
                            "' NDTRACE_OUTPUT='" + trace + "' " + kVectorAdd);
  CHECK(run.status == 0);
  CHECK(run.out == plain.out);
  const std::vector<std::string> said = NdtraceLines(run.err);
  REQUIRE(said.size() == 1);
  CHECK(said[0].find("cannot pin choices from " + garbage) != std::string::npos);
  const ndt::format::TraceHeader header = HeaderOf(trace);
  CHECK(header.policy == Policy::kPin);
  REQUIRE(header.notes.size() == 1);
  CHECK(header.notes[0].find("the program's own choices stand") != std::string::npos);
}

TEST_CASE("run applies the policy, lists its decisions and keeps no trace", "[policy]") {
  ndt::testing::TempDir dir;
  const RunResult plain = Run(kVectorAdd);
  const RunResult run =
      Run("env TMPDIR='" + dir.path().string() + "' " + kNdtrace + " run --deterministic -- " +
          kVectorAdd);
  CHECK(run.status == 0);
  CHECK(run.out == plain.out);
  const std::vector<std::string> said = NdtraceLines(run.err);
  REQUIRE(!said.empty());
  CHECK(said[0] == "ndtrace: 7 policy decisions");
  CHECK(std::find(said.begin(), said.end(), "ndtrace:   policy op 0: set NCCL_ALGO=Ring [nccl]") !=
        said.end());
  CHECK(std::filesystem::is_empty(dir.path()));
  // The program's exit status is run's.
  CHECK(Run(kNdtrace + " run --deterministic -- sh -c 'exit 7'").status == 7);
}
