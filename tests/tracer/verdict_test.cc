// `ndtrace check` verdicts on programs shaped like real training processes (issue "Verdicts you
// can trust"): threads that race to the driver, a caching allocator that hands blocks out in
// varying order, events from a pool; a racing kernel whose data reaches the host only through
// an asynchronous copy; programs that fail, or refuse a launch, or exit differently.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

const std::string kNdtrace = "'" NDTRACE_BIN "'";

RunResult Check(const std::string& dir, const std::string& options, const std::string& command) {
  return Run(kNdtrace + " check " + options + " -o '" + dir + "' -- " + command);
}

}  // namespace

TEST_CASE("check calls a program whose threads race to the driver deterministic, every time",
          "[verdict]") {
  ndt::testing::TempDir dir;
  // Each check's runs interleave the four workers differently: creation order of streams and
  // events, which blocks of the shared segment each tensor gets, which pooled event each record
  // uses. None of it is behaviour.
  for (int check = 0; check < 3; ++check) {
    const RunResult result =
        Check((dir / std::to_string(check)).string(), "-n 4", "'" PROG_THREAD_STREAMS "'");
    INFO(result.out << result.err);
    REQUIRE(result.status == 0);
    CHECK_THAT(result.out, Catch::Contains("ndtrace check: deterministic: 4 runs gave "
                                           "bitwise-identical results"));
    CHECK_THAT(result.out, Catch::Contains("would have been seen (95 % confidence)"));
  }
}

TEST_CASE("check: threads that get their streams from a pool in varying order are aligned",
          "[verdict]") {
  // The pool is created by whichever worker asks first and hands streams out in the order the
  // workers ask: a worker's stream varies, the order in which it uses its streams does not.
  ndt::testing::TempDir dir;
  for (int check = 0; check < 2; ++check) {
    const RunResult result = Check((dir / std::to_string(check)).string(), "-n 4",
                                   "'" PROG_THREAD_STREAMS "' --stream-pool");
    INFO(result.out << result.err);
    CHECK(result.status == 0);
  }
  const RunResult planted =
      Check((dir / "planted").string(), "", "'" PROG_THREAD_STREAMS "' --stream-pool --plant");
  INFO(planted.out << planted.err);
  CHECK(planted.status == 1);
  CHECK_THAT(planted.out, Catch::Contains("(nondeterministic_op; RacySum("));
}

TEST_CASE("check names the racing kernel of a multi-threaded program by replaying its suspect",
          "[verdict]") {
  ndt::testing::TempDir dir;
  const RunResult result = Check(dir.path().string(), "", "'" PROG_THREAD_STREAMS "' --plant");
  INFO(result.out << result.err);
  REQUIRE(result.status == 1);
  // The first report is the asynchronous copy's synchronize (propagated, suspect RacySum); the
  // check goes on until it names the kernel itself, and the verdict says what the report says.
  CHECK_THAT(result.err, Catch::Contains("narrowing it down"));
  CHECK_THAT(result.out, Catch::Contains("error[nondeterministic_op]: op "));
  CHECK_THAT(result.out, Catch::Contains("varies when replayed alone"));
  CHECK_THAT(result.out,
             Catch::Contains("ndtrace check: NOT deterministic: run 2 differs from run 1") &&
                 Catch::Contains("(nondeterministic_op; RacySum(float const*, float*, int, int))"));
  // Stops at the first run that differs.
  CHECK_FALSE(std::filesystem::exists(dir / "run-3.ndt"));
}

TEST_CASE("check with --narrow-runs 0 reports the suspect without narrowing", "[verdict]") {
  ndt::testing::TempDir dir;
  const RunResult result =
      Check(dir.path().string(), "--narrow-runs 0", "'" PROG_THREAD_STREAMS "' --plant");
  INFO(result.out << result.err);
  REQUIRE(result.status == 1);
  CHECK_THAT(result.out, Catch::Contains("error[propagated]") && Catch::Contains("suspect op ") &&
                             Catch::Contains("RacySum("));
  CHECK_THAT(result.out, Catch::Contains("(propagated; suspect op "));
}

TEST_CASE("check of a program that fails in every run says so and exits 4", "[verdict]") {
  ndt::testing::TempDir dir;
  const RunResult result = Check(dir.path().string(), "-n 2", "'" PROG_THREAD_STREAMS "' --exit 3");
  INFO(result.out << result.err);
  CHECK(result.status == 4);
  CHECK_THAT(result.out, Catch::Contains("ndtrace check: the program failed in every run "
                                         "(exit status 3)"));
  CHECK_THAT(result.out, !Catch::Contains("deterministic:"));
}

TEST_CASE("a launch the device refused is an op with its error status: the program failed",
          "[verdict]") {
  ndt::testing::TempDir dir;
  // The program ignores the error and exits 0, the same way every run: its work was not done.
  const RunResult result =
      Check(dir.path().string(), "-n 2", "'" PROG_THREAD_STREAMS "' --refused-launch");
  INFO(result.out << result.err);
  CHECK(result.status == 4);
  CHECK_THAT(result.err, Catch::Contains("1 failed CUDA calls"));
  CHECK_THAT(result.out, Catch::Contains("the program failed in every run (1 launch(es) refused "
                                         "by the device)") &&
                             Catch::Contains("1 CUDA call(s) failed, the same in every run "
                                             "(first: op 0 Step(float*, int, float) returned 1)"));
}

TEST_CASE("check: a run that exits with another status than run 1 is not deterministic",
          "[verdict]") {
  ndt::testing::TempDir dir;
  // Exit status 0 the first time, 1 the second: the GPU work is identical.
  const std::string counter = (dir / "counter").string();
  const RunResult result =
      Check((dir / "check").string(), "-n 3",
            "sh -c \"'" PROG_THREAD_STREAMS "' >/dev/null; n=\\$(cat '" + counter +
                "' 2>/dev/null || echo 0); echo \\$((n + 1)) > '" + counter + "'; exit \\$n\"");
  INFO(result.out << result.err);
  CHECK(result.status == 1);
  CHECK_THAT(result.out, Catch::Contains("error[exit_status]: the program's exit status 1 in run "
                                         "2, exit status 0 in run 1"));
  CHECK_THAT(result.out, Catch::Contains("ndtrace check: NOT deterministic: run 2 differs"));
}

TEST_CASE("diff refuses traces of different programs or inputs unless --force", "[verdict]") {
  ndt::testing::TempDir dir;
  const std::string vector_add = (dir / "vector_add.ndt").string();
  const std::string racy_sum = (dir / "racy_sum.ndt").string();
  REQUIRE(RecordRun(vector_add, PROG_VECTOR_ADD).status == 0);
  REQUIRE(RecordRun(racy_sum, PROG_RACY_SUM).status == 0);
  // The header names the executable and its digest.
  auto reader = ndt::format::TraceReader::Open(vector_add);
  REQUIRE(reader.ok());
  const auto& inputs = (*reader)->header().inputs;
  REQUIRE_FALSE(inputs.empty());
  CHECK_THAT(inputs.front().path, Catch::EndsWith("/vector_add"));
  CHECK(inputs.front().bytes > 0);
  CHECK(inputs.front().digest_lo != 0);

  const RunResult refused = Run(kNdtrace + " diff '" + vector_add + "' '" + racy_sum + "'");
  INFO(refused.out << refused.err);
  CHECK(refused.status == 2);
  CHECK_THAT(refused.err, Catch::Contains("error: diff: the runs are not of the same program and "
                                          "input (program, command line, input ") &&
                              Catch::Contains("--force compares them anyway"));
  CHECK_THAT(refused.out, Catch::Contains("program differs: vector_add (run A) vs racy_sum"));
  const RunResult forced = Run(kNdtrace + " diff --force '" + vector_add + "' '" + racy_sum + "'");
  CHECK(forced.status == 1);
  CHECK_THAT(forced.out, Catch::Contains("differ in structure"));
  // The same program twice is compared as ever.
  const std::string again = (dir / "again.ndt").string();
  REQUIRE(RecordRun(again, PROG_VECTOR_ADD).status == 0);
  CHECK(Run(kNdtrace + " diff '" + vector_add + "' '" + again + "'").status == 0);
}
