// Standalone op replay of cuBLAS GEMMs, cuBLASLt matmuls and cuRAND generation end to end on the
// stand-in device: `ndtrace record --capture` stores the ops' matrices (or drawn numbers) in the
// blob stream, and `ndtrace replay TRACE --op N` re-runs one alone. The stand-in's racing
// split-K matmul (out-of-place reduction with atomics), its GEMM with atomics allowed and its
// autotuned GEMM vary; the deterministic alternatives, a deterministic GEMM and a cuRAND
// generate are stable and reproduce what was recorded; uncaptured and damaged ops are refused.
// Exit codes: 0 stable, 1 varies, 2 error. Stand-in results only.
#include <catch2/catch.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "formats/records.h"
#include "support/captured_trace.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

const std::string kNdtrace = "'" NDTRACE_BIN "'";

RunResult RecordProgram(const std::string& trace, const std::string& capture,
                        const std::string& program, const std::string& args = "") {
  std::remove(trace.c_str());
  return Run(kNdtrace + " record --capture " + capture + " -o '" + trace + "' -- '" + program +
             "' " + args);
}

std::vector<OpRecord> Named(const std::string& trace, const std::string& name) {
  std::vector<OpRecord> ops;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.name == name) ops.push_back(op);
  }
  return ops;
}

// The algorithm rows of a replay report: (row, whether it says "stable").
std::vector<std::pair<std::string, bool>> Rows(const std::string& out) {
  std::vector<std::pair<std::string, bool>> rows;
  for (const std::string& line : Lines(out)) {
    if (line.size() < 3 || line[0] != ' ' || line[1] != ' ') continue;
    if (line[2] != '-' && (line[2] < '0' || line[2] > '9')) continue;
    rows.emplace_back(line, line.size() >= 6 && line.substr(line.size() - 6) == "stable");
  }
  return rows;
}

TEST_CASE(
    "replay --op shows that a captured cuBLASLt split-K matmul with an out-of-place "
    "reduction varies alone and that the heuristic's deterministic algos do not",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "lt.ndt").string();
  const RunResult recorded = RecordProgram(trace, "cublas_lt_matmul", PROG_GEMM, "--lt");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<OpRecord> matmuls = Named(trace, "cublasLtMatmul");
  REQUIRE(matmuls.size() == 1);
  const OpRecord& op = matmuls[0];
  // D = A B (beta = 0): A and B are read, C is not; D is the output.
  CHECK(Text(op, "blob:in:A"));
  CHECK(Text(op, "blob:in:B"));
  CHECK_FALSE(Text(op, "blob:in:C"));
  CHECK(Text(op, "blob:out:D"));
  REQUIRE(op.algorithm);
  CHECK(op.algorithm->determinism == ndt::format::Determinism::kNondeterministic);

  const RunResult replayed = Replay(trace, op.sequence, "--repeat 10");
  INFO(replayed.out << replayed.err);
  CHECK(replayed.status == 1);
  CHECK(Contains(replayed.out, "output compared: D (4096 bytes)"));
  CHECK(Contains(replayed.out,
                 "VARIES on its own: 10 runs of algo 2 tile 3 splitK 4 reduction 2 gave "));

  const RunResult tried = Replay(trace, op.sequence, "--repeat 10 --try-deterministic");
  INFO(tried.out << tried.err);
  CHECK(tried.status == 1);
  const auto rows = Rows(tried.out);
  REQUIRE(rows.size() == 3);  // the recorded algo and the two without out-of-place split-K
  CHECK(Contains(rows[0].first, "(recorded)"));
  CHECK(Contains(rows[0].first, "nondeterministic"));
  CHECK_FALSE(rows[0].second);
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i].second);
    CHECK(Contains(rows[i].first, " deterministic "));
  }
  CHECK(Contains(tried.out,
                 "deterministic alternatives with stable output: algo 0 tile 1 "
                 "splitK 1 reduction 0 ("));
  CHECK(Contains(tried.out, "algo 1 tile 2 splitK 2 reduction 1 ("));
}

TEST_CASE(
    "replay --op of a captured deterministic cuBLAS GEMM is stable and reproduces the "
    "recorded output",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "gemm.ndt").string();
  const RunResult recorded = RecordProgram(trace, "cublas_gemm", PROG_GEMM);
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<OpRecord> sgemm = Named(trace, "cublasSgemm_v2");
  const std::vector<OpRecord> gemm_ex = Named(trace, "cublasGemmEx");
  REQUIRE(sgemm.size() == 1);
  REQUIRE(gemm_ex.size() == 1);
  // cublasGemmEx accumulates into C (beta = 1): what cublasSgemm_v2 wrote is what it read.
  CHECK_FALSE(Text(sgemm[0], "blob:in:C"));
  REQUIRE(Text(gemm_ex[0], "blob:in:C"));
  CHECK(Text(gemm_ex[0], "blob:in:C") == Text(sgemm[0], "blob:out:C"));
  for (const OpRecord& op : {sgemm[0], gemm_ex[0]}) {
    const RunResult replayed = Replay(trace, op.sequence, "--repeat 5");
    INFO(op.name << "\n" << replayed.out << replayed.err);
    CHECK(replayed.status == 0);
    CHECK(Contains(replayed.out, "is stable: 5 runs of CUBLAS_GEMM_DEFAULT gave bitwise"));
    CHECK(Contains(replayed.out, " 5/5 "));  // every run equals the recorded output bitwise
  }
}

TEST_CASE(
    "replay --op shows that a GEMM with atomics allowed or autotuned varies alone and "
    "that with atomics not allowed it does not",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "atomics.ndt").string();
  REQUIRE(RecordProgram(trace, "cublasGemmEx", PROG_GEMM, "--atomics").status == 0);
  const std::vector<OpRecord> gemm_ex = Named(trace, "cublasGemmEx");
  REQUIRE(gemm_ex.size() == 1);
  CHECK_FALSE(Text(Named(trace, "cublasSgemm_v2")[0], "blob:out:C"));  // not chosen

  const RunResult tried = Replay(trace, gemm_ex[0].sequence, "--repeat 10 --try-deterministic");
  INFO(tried.out << tried.err);
  CHECK(tried.status == 1);
  CHECK(Contains(tried.out, "VARIES on its own: 10 runs of CUBLAS_GEMM_DEFAULT (atomics allowed)"));
  const auto rows = Rows(tried.out);
  REQUIRE(rows.size() == 26);  // the recorded call, DEFAULT and ALGO0..23 without atomics
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i].second);
    CHECK(Contains(rows[i].first, "(atomics not allowed)"));
  }
  CHECK(Contains(tried.out,
                 "deterministic alternatives with stable output: CUBLAS_GEMM_DEFAULT "
                 "(atomics not allowed) ("));

  // CUBLAS_GEMM_AUTOTUNE chooses by timing: every run on a fresh handle chooses again.
  const std::string autotuned = (dir / "autotune.ndt").string();
  REQUIRE(RecordProgram(autotuned, "cublasGemmEx", PROG_GEMM, "--autotune").status == 0);
  const RunResult autotune =
      Replay(autotuned, Named(autotuned, "cublasGemmEx")[0].sequence, "--repeat 12");
  INFO(autotune.out << autotune.err);
  CHECK(autotune.status == 1);
  CHECK(Contains(autotune.out, "VARIES on its own: 12 runs of CUBLAS_GEMM_AUTOTUNE"));
}

TEST_CASE("replay --op of a captured cuRAND generate draws the recorded numbers again",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "curand.ndt").string();
  const RunResult recorded = RecordProgram(trace, "curand_generate", PROG_CURAND_SAMPLE, "2");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  for (const char* name : {"curandGenerateUniform", "curandGenerateNormal"}) {
    const std::vector<OpRecord> ops = Named(trace, name);
    REQUIRE(ops.size() == 2);
    CHECK(Text(ops[1], "blob:out:output"));
    CHECK_FALSE(Text(ops[1], "blob:in:output"));
    // The second call draws from a later offset: other numbers, reproduced all the same.
    CHECK(Text(ops[0], "blob:out:output") != Text(ops[1], "blob:out:output"));
    for (const OpRecord& op : ops) {
      const RunResult replayed = Replay(trace, op.sequence, "--repeat 5");
      INFO(name << "\n" << replayed.out << replayed.err);
      CHECK(replayed.status == 0);
      CHECK(Contains(replayed.out, "is stable: 5 runs of CURAND_ORDERING_PSEUDO_DEFAULT"));
      CHECK(Contains(replayed.out, " 5/5 "));
    }
  }

  // The device-dependent ordering: its fixed alternatives are tried.
  const std::string dynamic = (dir / "dynamic.ndt").string();
  REQUIRE(RecordProgram(dynamic, "curandGenerateUniform", PROG_CURAND_SAMPLE, "--dynamic").status ==
          0);
  const RunResult tried = Replay(dynamic, Named(dynamic, "curandGenerateUniform")[0].sequence,
                                 "--repeat 4 --try-deterministic");
  INFO(tried.out << tried.err);
  CHECK(tried.status == 0);
  CHECK(Contains(tried.out, "CURAND_ORDERING_PSEUDO_DYNAMIC (recorded)"));
  CHECK(Contains(tried.out, " 4/4 "));
  CHECK(Rows(tried.out).size() == 5);
  CHECK(Contains(tried.out,
                 "deterministic alternatives with stable output: "
                 "CURAND_ORDERING_PSEUDO_DEFAULT ("));
}

TEST_CASE("replay --op of a captured double-precision cuRAND generate draws it again",
          "[tracer][op_replay]") {
  // tests/corpus/monte_carlo: per thread 4 batches of normal, log-normal and uniform doubles
  // from a Philox generator skipped ahead (--mrg: MRG32k3a). Each Philox double takes two 32-bit
  // draws, an MRG32k3a double one: a later call's recorded offset is right only if the tracer
  // advanced it so, and replaying from it then draws the captured numbers.
  ndt::testing::TempDir dir;
  for (const bool mrg : {false, true}) {
    const std::string trace = (dir / (mrg ? "mrg.ndt" : "monte_carlo.ndt")).string();
    const RunResult recorded =
        RecordProgram(trace, "curand_generate", CORPUS_MONTE_CARLO, mrg ? "--mrg" : "");
    INFO(recorded.err);
    REQUIRE(recorded.status == 0);
    for (const char* name : {"curandGenerateNormalDouble", "curandGenerateLogNormalDouble",
                             "curandGenerateUniformDouble"}) {
      const std::vector<OpRecord> ops = Named(trace, name);
      REQUIRE(ops.size() == 8);
      const OpRecord& later = ops.back();
      REQUIRE(later.rng.has_value());
      CHECK(later.rng->generator == (mrg ? "curand:MRG32K3A" : "curand:PHILOX4_32_10"));
      CHECK(later.rng->offset % ((mrg ? 1 : 2) * 8192) == 0);
      const RunResult replayed = Replay(trace, later.sequence, "--repeat 3");
      INFO(name << "\n" << replayed.out << replayed.err);
      CHECK(replayed.status == 0);
      CHECK(Contains(replayed.out, "is stable: 3 runs of CURAND_ORDERING_PSEUDO_DEFAULT"));
      CHECK(Contains(replayed.out, " 3/3 "));
    }
  }
}

TEST_CASE(
    "replay --op refuses an uncaptured library op and a captured one whose arguments are "
    "damaged",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "gemm.ndt").string();
  REQUIRE(RecordProgram(trace, "cublasGemmEx", PROG_GEMM).status == 0);
  const OpRecord sgemm = Named(trace, "cublasSgemm_v2")[0];
  const OpRecord gemm_ex = Named(trace, "cublasGemmEx")[0];

  const RunResult uncaptured = Replay(trace, sgemm.sequence);
  CHECK(uncaptured.status == 2);
  CHECK(Contains(uncaptured.err, "error: replay: "));
  CHECK(Contains(uncaptured.err, "was not captured: record it with `ndtrace record --capture " +
                                     std::to_string(sgemm.sequence)));

  const RunResult handle_op = Replay(trace, Named(trace, "cublasCreate_v2")[0].sequence);
  CHECK(handle_op.status == 2);
  CHECK(Contains(handle_op.err, "(cublasCreate_v2, kind other) cannot be replayed alone: "
                                "standalone replay re-executes "));
  CHECK(Contains(handle_op.err, "cuBLAS GEMMs, cuBLASLt matmuls, cuRAND generation"));

  // Dimensions larger than any capture: refused before anything is allocated.
  const std::string huge = (dir / "huge.ndt").string();
  RewriteTrace(trace, huge, nullptr, [&](OpRecord* op) {
    if (op->sequence != gemm_ex.sequence) return;
    for (Argument& argument : op->args) {
      if (argument.name == "n" || argument.name == "k" || argument.name == "ldb") {
        argument.value = int64_t{2000000000};
      }
    }
  });
  const RunResult refused = Replay(huge, gemm_ex.sequence);
  INFO(refused.out << refused.err);
  CHECK(refused.status == 2);
  CHECK(Contains(refused.err, "more than a capture holds"));

  // An argument replay needs, gone.
  const std::string lacking = (dir / "lacking.ndt").string();
  RewriteTrace(trace, lacking, nullptr, [&](OpRecord* op) {
    if (op->sequence != gemm_ex.sequence) return;
    std::erase_if(op->args, [](const Argument& argument) { return argument.name == "lda"; });
  });
  const RunResult missing = Replay(lacking, gemm_ex.sequence);
  CHECK(missing.status == 2);
  CHECK(Contains(missing.err, "lacks what is needed to rebuild its GEMM: lda"));

  // Shapes that disagree with the captured matrices.
  const std::string reshaped = (dir / "reshaped.ndt").string();
  RewriteTrace(trace, reshaped, nullptr, [&](OpRecord* op) {
    if (op->sequence != gemm_ex.sequence) return;
    for (Argument& argument : op->args) {
      if (argument.name == "k") argument.value = int64_t{512};
    }
  });
  const RunResult mismatch = Replay(reshaped, gemm_ex.sequence);
  CHECK(mismatch.status == 2);
  CHECK(Contains(mismatch.err, "its descriptors describe"));
}

}  // namespace
