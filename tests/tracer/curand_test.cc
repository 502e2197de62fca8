// End-to-end tests of the cuRAND hooks: tests/programs/curand_sample under `ndtrace record`,
// `check` and `--pin` on the stand-in device (stand-in libcurand.so.10, Philox4x32-10 on the
// host).
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::format::PolicyDecisionRecord;
using ndt::format::Record;

std::vector<OpRecord> Generates(const std::vector<OpRecord>& ops) {
  std::vector<OpRecord> generates;
  for (const OpRecord& op : ops) {
    if (op.kind == OpKind::kCurandGenerate) generates.push_back(op);
  }
  return generates;
}

// The policy decisions about cuRAND.
std::vector<PolicyDecisionRecord> Decisions(const std::vector<Record>& records) {
  std::vector<PolicyDecisionRecord> decisions;
  for (const Record& record : records) {
    if (const auto* decision = std::get_if<PolicyDecisionRecord>(&record);
        decision != nullptr && decision->library == "curand") {
      decisions.push_back(*decision);
    }
  }
  return decisions;
}

std::string TextArg(const OpRecord& op, const std::string& name) {
  for (const auto& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* text = std::get_if<std::string>(&argument.value)) return *text;
  }
  return "";
}

// The "checksum ..." line a program printed.
std::string Checksum(const std::string& out) {
  for (const std::string& line : Lines(out)) {
    if (line.rfind("checksum ", 0) == 0) return line;
  }
  return "";
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

const std::string kProgram = PROG_CURAND_SAMPLE;

TEST_CASE("recording curand_sample gives each generate its Philox state, fingerprint and output "
          "digest", "[tracer][curand]") {
  const RunResult plain = Run("'" + kProgram + "'");
  REQUIRE(plain.status == 0);
  const std::string trace = TempPath("curand_observe.ndt");
  const RunResult traced = RecordRun(trace, kProgram, "");
  INFO(traced.err);
  REQUIRE(traced.status == 0);
  CHECK(Checksum(traced.out) == Checksum(plain.out));

  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  const std::vector<OpRecord> generates = Generates(ops);
  REQUIRE(generates.size() == 2);
  const uint64_t offsets[] = {0, 4096};
  const char* names[] = {"curandGenerateUniform", "curandGenerateNormal"};
  for (size_t i = 0; i < 2; ++i) {
    const OpRecord& op = generates[i];
    INFO(op.name);
    CHECK(op.name == names[i]);
    REQUIRE(op.rng.has_value());
    CHECK(op.rng->generator == "curand:PHILOX4_32_10");
    CHECK(op.rng->seed == 1234);
    CHECK(op.rng->offset == offsets[i]);
    CHECK(op.rng->ordering == "PSEUDO_DEFAULT");
    CHECK_FALSE(op.rng->device_dependent);
    CHECK_THAT(TextArg(op, "fingerprint"),
               Catch::StartsWith("curand generator 1 generate " + std::to_string(i) + ": philox "));
    REQUIRE(op.outputs.size() == 1);
    CHECK(op.outputs[0].role == "output");
    CHECK(op.outputs[0].bytes == 4096 * sizeof(float));
    CHECK(op.outputs[0].dtype == ndt::format::DType::kF32);
    // The host copy of the same buffer, digested when its stream synchronised, has the digest
    // the generate op recorded for its output.
    bool matched = false;
    for (const OpRecord& later : ops) {
      if (later.sequence <= op.sequence) continue;
      for (const auto& digest : later.outputs) {
        if (digest.role.rfind("dst of op", 0) == 0 &&
            digest.pointer.allocation_id == op.outputs[0].pointer.allocation_id) {
          matched = matched || digest.digest == op.outputs[0].digest;
        }
      }
    }
    CHECK(matched);
  }
  CHECK(generates[0].outputs[0].digest != generates[1].outputs[0].digest);
  std::remove(trace.c_str());
}

TEST_CASE("ndtrace check finds an unseeded curand_sample nondeterministic through its RNG state",
          "[tracer][curand]") {
  const std::string dir = TempPath("curand_check_unseeded");
  const RunResult check = Run("'" NDTRACE_BIN "' check -n 2 -o '" + dir + "' -- '" + kProgram +
                              "' --unseeded");
  INFO(check.out << check.err);
  CHECK(check.status == 1);
  CHECK_THAT(check.out,
             Catch::Contains("error[rng_state]") && Catch::Contains("curandGenerateUniform") &&
                 Catch::Contains("run 2 differs from run 1 (2 runs made): op 4 (rng_state"));
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("ndtrace check finds a seeded curand_sample deterministic", "[tracer][curand]") {
  const std::string dir = TempPath("curand_check_seeded");
  const RunResult check =
      Run("'" NDTRACE_BIN "' check -n 2 -o '" + dir + "' -- '" + kProgram + "' 2");
  INFO(check.out << check.err);
  CHECK(check.status == 0);
  CHECK_THAT(check.out, Catch::Contains("deterministic"));
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("pinning makes an unseeded curand_sample draw the numbers of the recorded run",
          "[tracer][curand]") {
  const std::string reference = TempPath("curand_pin_reference.ndt");
  const std::string pinned = TempPath("curand_pinned.ndt");
  const std::string unpinned = TempPath("curand_unpinned.ndt");
  const RunResult first = RecordRun(reference, kProgram + "' '--unseeded' '2", "");
  REQUIRE(first.status == 0);
  const RunResult other = RecordRun(unpinned, kProgram + "' '--unseeded' '2", "");
  REQUIRE(other.status == 0);
  REQUIRE(Checksum(other.out) != Checksum(first.out));  // the seeds differ
  const RunResult second =
      RecordRun(pinned, kProgram + "' '--unseeded' '2", "--pin '" + reference + "'");
  INFO(second.err);
  REQUIRE(second.status == 0);
  CHECK(Checksum(second.out) == Checksum(first.out));

  const std::vector<Record> records = ReadAll(pinned);
  const std::vector<OpRecord> a = Generates(Ops(ReadAll(reference)));
  const std::vector<OpRecord> b = Generates(Ops(records));
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].rng == b[i].rng);
    REQUIRE(b[i].outputs.size() == 1);
    CHECK(a[i].outputs[0].digest == b[i].outputs[0].digest);
  }
  // Pinning the first call moves the generator onto the recorded sequence; the later calls
  // then find it in the recorded state already and need no decision.
  const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
  REQUIRE(decisions.size() == 1);
  CHECK(decisions[0].op_sequence == b[0].sequence);
  for (const PolicyDecisionRecord& decision : decisions) {
    CHECK(decision.applied);
    CHECK(decision.library == "curand");
    CHECK_THAT(decision.action, Catch::StartsWith("pinned curand generator 1 to seed " +
                                                  std::to_string(a[0].rng->seed)));
  }
  const RunResult diff = Run("'" NDTRACE_BIN "' diff '" + reference + "' '" + pinned + "'");
  INFO(diff.out);
  CHECK(diff.status == 0);
  for (const auto& path : {reference, pinned, unpinned}) std::remove(path.c_str());
}

TEST_CASE("a curand call the reference never made is reported once and the run completes",
          "[tracer][curand]") {
  const std::string reference = TempPath("curand_short_reference.ndt");
  const std::string pinned = TempPath("curand_longer_pinned.ndt");
  REQUIRE(RecordRun(reference, kProgram, "").status == 0);  // 1 iteration: calls 0 and 1
  const RunResult run = RecordRun(pinned, kProgram + "' '3", "--pin '" + reference + "'");
  INFO(run.err);
  CHECK(run.status == 0);
  CHECK_FALSE(Checksum(run.out).empty());
  CHECK(Count(run.err, "cannot pin curand generator 1 philox uniform n=4096") == 1);
  CHECK(Count(run.err, "cannot pin curand generator 1 philox normal n=4096") == 1);
  size_t unapplied = 0;
  for (const PolicyDecisionRecord& decision : Decisions(ReadAll(pinned))) {
    if (!decision.applied) ++unapplied;
  }
  CHECK(unapplied == 4);  // generate calls 2..5, each recorded
  std::remove(reference.c_str());
  std::remove(pinned.c_str());
}

TEST_CASE("the deterministic policy replaces the device-dependent PSEUDO_DYNAMIC ordering",
          "[tracer][curand]") {
  const std::string observed = TempPath("curand_dynamic.ndt");
  const std::string enforced = TempPath("curand_dynamic_enforced.ndt");
  const RunResult plain = Run("'" + kProgram + "'");
  const RunResult dynamic = RecordRun(observed, kProgram + "' '--dynamic", "");
  const RunResult fixed = RecordRun(enforced, kProgram + "' '--dynamic", "--deterministic");
  REQUIRE(plain.status == 0);
  REQUIRE(dynamic.status == 0);
  REQUIRE(fixed.status == 0);
  CHECK(Checksum(dynamic.out) != Checksum(plain.out));
  CHECK(Checksum(fixed.out) == Checksum(plain.out));

  for (const OpRecord& op : Generates(Ops(ReadAll(observed)))) {
    REQUIRE(op.rng.has_value());
    CHECK(op.rng->ordering == "PSEUDO_DYNAMIC");
    CHECK(op.rng->device_dependent);
  }
  const std::vector<Record> records = ReadAll(enforced);
  for (const OpRecord& op : Generates(Ops(records))) {
    REQUIRE(op.rng.has_value());
    CHECK(op.rng->ordering == "PSEUDO_DEFAULT");
    CHECK_FALSE(op.rng->device_dependent);
  }
  const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
  REQUIRE(decisions.size() == 1);
  CHECK(decisions[0].applied);
  CHECK(decisions[0].action ==
        "replaced curand generator 1 ordering PSEUDO_DYNAMIC (device-dependent) by "
        "PSEUDO_DEFAULT");
  std::remove(observed.c_str());
  std::remove(enforced.c_str());
}

}  // namespace

// Metadata only (NDTRACE_LIBRARY_DIGESTS=0, as `ndtrace run` records), a generate takes the raw
// path: the encoder builds its record from the call's facts. It must equal the record the hook
// builds with digests on, digests aside: arguments, fingerprint and RNG state, with the policy
// changing the ordering too.
TEST_CASE("metadata only, generate records are built off the calling thread and equal the "
          "records with digests, digests aside",
          "[tracer][curand]") {
  const std::string with = TempPath("curand_digests.ndt");
  const std::string without = TempPath("curand_metadata.ndt");
  for (const std::string options : {"", "--deterministic"}) {
    INFO("options: " << options);
    const std::string program = "'" + kProgram + "' --dynamic 3";
    std::remove(with.c_str());
    std::remove(without.c_str());
    REQUIRE(Run("'" NDTRACE_BIN "' record " + options + " -o '" + with + "' -- " + program)
                .status == 0);
    const RunResult metadata = Run("NDTRACE_LIBRARY_DIGESTS=0 '" NDTRACE_BIN "' record " +
                                   options + " -o '" + without + "' -- " + program);
    REQUIRE(metadata.status == 0);
    // (The deterministic policy replaces the ordering: other numbers than untraced.)
    if (options.empty()) CHECK(Checksum(metadata.out) == Checksum(Run(program).out));
    const std::vector<OpRecord> a = Generates(Ops(ReadAll(with)));
    const std::vector<OpRecord> b = Generates(Ops(ReadAll(without)));
    REQUIRE(a.size() == 6);  // 3 uniform and 3 normal draws
    REQUIRE(b.size() == a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("generate " << i << ": " << a[i].name);
      CHECK(a[i].name == b[i].name);
      CHECK(a[i].stream_id == b[i].stream_id);
      CHECK(a[i].status == b[i].status);
      CHECK(a[i].rng == b[i].rng);
      CHECK(a[i].rng.has_value());
      CHECK(!a[i].outputs.empty());
      CHECK(b[i].outputs.empty());
      CHECK(a[i].args.size() == b[i].args.size());
      for (size_t j = 0; j < std::min(a[i].args.size(), b[i].args.size()); ++j) {
        INFO("argument " << a[i].args[j].name);
        CHECK(a[i].args[j].name == b[i].args[j].name);
        if (const auto* p = std::get_if<ndt::format::DevicePointer>(&a[i].args[j].value)) {
          const auto* q = std::get_if<ndt::format::DevicePointer>(&b[i].args[j].value);
          REQUIRE(q != nullptr);
          CHECK(p->allocation_id == q->allocation_id);
          CHECK(p->offset == q->offset);
        } else {
          CHECK(a[i].args[j].value == b[i].args[j].value);
        }
      }
    }
  }
  std::remove(with.c_str());
  std::remove(without.c_str());
}
