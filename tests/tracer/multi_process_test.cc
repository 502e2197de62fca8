// Runs of several processes on the stand-in device: each process of a run writes its own trace
// (the one the launcher started: the path itself; ranked ones `.rank<R>`), `record` lists them,
// and `check` compares two runs rank by rank.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

const std::string kNdtrace = "'" NDTRACE_BIN "'";

// A shell command line that runs `rank0` with RANK=0 and `rank1` with RANK=1 at once.
std::string TwoRanks(const std::string& rank0, const std::string& rank1) {
  return "sh -c \"RANK=0 '" + rank0 + "' >/dev/null & RANK=1 '" + rank1 +
         "' >/dev/null & wait\"";
}

}  // namespace

TEST_CASE("record: every process of a run writes its own trace, named by rank", "[multi]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "run.ndt").string();
  const RunResult run = Run(kNdtrace + " record -o '" + trace + "' -- " +
                            TwoRanks(PROG_VECTOR_ADD, PROG_VECTOR_ADD));
  REQUIRE(run.status == 0);
  // The shell the launcher started made no CUDA call: no main trace.
  CHECK_FALSE(std::filesystem::exists(trace));
  for (int rank : {0, 1}) {
    const std::string path = trace + ".rank" + std::to_string(rank);
    INFO(path);
    auto reader = ndt::format::TraceReader::Open(path);
    REQUIRE(reader.ok());
    CHECK((*reader)->header().rank == rank);
    CHECK(run.err.find("ndtrace: trace written to " + path + " (rank " + std::to_string(rank) +
                       ", 28 ops,") != std::string::npos);
  }
}

TEST_CASE("check compares two runs rank by rank and names the rank that diverged", "[multi]") {
  ndt::testing::TempDir dir;
  const RunResult run = Run(kNdtrace + " check -n 2 -o '" + dir.path().string() + "' -- " +
                            TwoRanks(PROG_VECTOR_ADD, PROG_RACY_SUM));
  CHECK(run.status == 1);
  CHECK(run.err.find("run 1: exit status 0, 33 ops recorded by 2 processes") != std::string::npos);
  CHECK(run.out.find("== rank 0: ") != std::string::npos);
  CHECK(run.out.find("== rank 1: ") != std::string::npos);
  CHECK(run.out.find("2 processes compared, 1 diverged") != std::string::npos);
  CHECK(run.out.find("NOT deterministic: run 2 differs from run 1 (2 runs made): rank 1, op ") !=
        std::string::npos);
  CHECK(run.out.find("RacySum") != std::string::npos);

  // diff takes the same runs, and directories of traces.
  const std::string a = (dir / "run-1.ndt").string(), b = (dir / "run-2.ndt").string();
  const RunResult diff = Run(kNdtrace + " diff --json '" + a + "' '" + b + "'");
  CHECK(diff.status == 1);
  CHECK(diff.out.find("\"schema\": \"ndtrace.diff-set/1\"") != std::string::npos);

  // export --diff puts every process of both runs on the timeline, paired by rank, and flags
  // the first divergence in the rank that diverged.
  const std::string json = (dir / "both.json").string();
  const RunResult exported = Run(kNdtrace + " export '" + a + "' --format perfetto --diff '" +
                                 b + "' -o '" + json + "'");
  CHECK(exported.status == 0);
  const std::string timeline = Slurp(json);
  for (const char* process : {"\"run A (rank 0): ", "\"run B (rank 0): ", "\"run A (rank 1): ",
                              "\"run B (rank 1): "}) {
    INFO(process);
    CHECK(timeline.find(process) != std::string::npos);
  }
  size_t flagged = 0;
  for (size_t at = timeline.find("\"FIRST DIVERGENCE: "); at != std::string::npos;
       at = timeline.find("\"FIRST DIVERGENCE: ", at + 1)) {
    ++flagged;
  }
  CHECK(flagged == 2);  // rank 1's op, in run A and in run B
}

TEST_CASE("check: two deterministic ranks are identical", "[multi]") {
  ndt::testing::TempDir dir;
  const RunResult run = Run(kNdtrace + " check -n 2 -o '" + dir.path().string() + "' -- " +
                            TwoRanks(PROG_VECTOR_ADD, PROG_DRIVER_ONLY));
  CHECK(run.status == 0);
  CHECK(run.out.find("deterministic: 2 runs gave bitwise-identical results") != std::string::npos);
}

TEST_CASE("replay follows every rank of a run and names the rank that diverged", "[multi]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "run.ndt").string();
  const std::string command = TwoRanks(PROG_VECTOR_ADD, PROG_RACY_SUM);
  REQUIRE(Run(kNdtrace + " record -o '" + reference + "' -- " + command).status == 0);
  const std::string replayed = (dir / "again.ndt").string();
  RunResult replay;
  // Racing float sums can come out equal by chance: allow two more attempts.
  for (int attempt = 0; attempt < 3; ++attempt) {
    replay = Run(kNdtrace + " replay '" + reference + "' -o '" + replayed + "' -- " + command);
    if (replay.status != 0) break;
  }
  INFO(replay.out << replay.err);
  CHECK(replay.status == 1);
  CHECK(replay.out.find("== rank 1: ") != std::string::npos);
  CHECK(replay.out.find("RacySum") != std::string::npos);
  CHECK(replay.out.find("diverged from the reference") != std::string::npos);
  // Each rank pinned from its own rank's reference.
  for (int rank : {0, 1}) {
    auto reader = ndt::format::TraceReader::Open(replayed + ".rank" + std::to_string(rank));
    REQUIRE(reader.ok());
    CHECK((*reader)->header().pinned_from == reference + ".rank" + std::to_string(rank));
  }

  // Two deterministic ranks replay identical.
  const std::string steady = (dir / "steady.ndt").string();
  const std::string steady_command = TwoRanks(PROG_VECTOR_ADD, PROG_VECTOR_ADD);
  REQUIRE(Run(kNdtrace + " record -o '" + steady + "' -- " + steady_command).status == 0);
  const RunResult same = Run(kNdtrace + " replay '" + steady + "' -o '" +
                             (dir / "steady-again.ndt").string() + "' -- " + steady_command);
  INFO(same.out << same.err);
  CHECK(same.status == 0);
  CHECK(same.out.find("identical to the reference, rank by rank") != std::string::npos);
}
