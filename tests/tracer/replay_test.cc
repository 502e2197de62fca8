// `ndtrace replay TRACE -- CMD...` (live verify) end to end on the stand-in device: a
// deterministic program replays identical to its reference, a nondeterministic one is stopped
// at its racing op, a structural difference is reported, and a reference from another program
// or a damaged one is refused before anything runs.
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

const std::string kNdtrace = "'" NDTRACE_BIN "'";

uint64_t CountOps(const std::string& path) {
  auto reader = ndt::format::TraceReader::Open(path);
  REQUIRE(reader.ok());
  uint64_t ops = 0;
  Record record;
  while ((*reader)->Next(&record)) ops += std::holds_alternative<OpRecord>(record) ? 1 : 0;
  return ops;
}

}  // namespace

TEST_CASE("replay of a deterministic program runs to the end identical to its reference",
          "[replay]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(RecordRun(reference, PROG_VECTOR_ADD, "--digest-window 0:").status == 0);
  const std::string replayed = (dir / "new.ndt").string();
  const RunResult replay = Run(kNdtrace + " replay '" + reference + "' -o '" + replayed +
                               "' --stop -- '" PROG_VECTOR_ADD "'");
  INFO(replay.out << replay.err);
  CHECK(replay.status == 0);
  CHECK(Contains(replay.out, "identical to the reference"));
  // The digest window the reference was recorded with is used again.
  CHECK(Contains(replay.err, "before and after each op of 0:"));
  CHECK(CountOps(replayed) == CountOps(reference));
}

TEST_CASE("replay --stop ends a nondeterministic program at the racing op", "[replay]") {
  ndt::testing::TempDir dir;
  // RacySum is iteration 2000, op 2003; per-op digests around it. The reference has 300,000
  // iterations; the replayed run would have ten times as many, so that it is still running
  // when the follower sees the difference however loaded the machine is (the ops past the
  // reference's end would only come after the divergence).
  const std::string reference_program = std::string("'" PROG_MANY_OPS "' 300000 2000");
  const std::string program = std::string("'" PROG_MANY_OPS "' 3000000 2000");
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(Run(kNdtrace + " record --digest-window 1990:2010 -o '" + reference + "' -- " +
              reference_program)
              .status == 0);
  REQUIRE(CountOps(reference) > 300000);
  const std::string replayed = (dir / "new.ndt").string();
  RunResult replay;
  // Racing float sums can come out equal by chance: allow two more attempts.
  for (int attempt = 0; attempt < 3; ++attempt) {
    replay = Run(kNdtrace + " replay '" + reference + "' -o '" + replayed + "' --stop -- " +
                 program);
    if (replay.status != 0) break;
  }
  INFO(replay.out << replay.err);
  REQUIRE(replay.status == 1);
  CHECK(Contains(replay.out, "nondeterministic_op"));
  CHECK(Contains(replay.out, "RacySum"));
  CHECK(Contains(replay.out, "op 2003"));
  CHECK(Contains(replay.out, "stopped the program at the first divergence"));
  const uint64_t replayed_ops = CountOps(replayed);
  CHECK(replayed_ops > 2003);
  CHECK(replayed_ops < 3000000);
}

TEST_CASE("replay reports a structural difference from the reference", "[replay]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(Run(kNdtrace + " record -o '" + reference + "' -- '" PROG_MANY_OPS "' 1000 -1").status ==
          0);
  // The same program issuing 200 more launches than its reference.
  const RunResult replay = Run(kNdtrace + " replay '" + reference + "' -o '" +
                               (dir / "new.ndt").string() + "' -- '" PROG_MANY_OPS "' 1200 -1");
  INFO(replay.out << replay.err);
  CHECK(replay.status == 1);
  CHECK(Contains(replay.err, "warning: replay: the reference was recorded with arguments"));
  CHECK(Contains(replay.out, "the runs differ in structure"));
  CHECK(Contains(replay.out, "run B: op 1003"));
}

TEST_CASE("replay refuses a reference recorded from another program", "[replay]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(RecordRun(reference, PROG_VECTOR_ADD).status == 0);
  const std::string replayed = (dir / "new.ndt").string();
  const RunResult replay = Run(kNdtrace + " replay '" + reference + "' -o '" + replayed +
                               "' -- '" PROG_RACY_SUM "'");
  INFO(replay.out << replay.err);
  CHECK(replay.status == 2);
  CHECK(Contains(replay.err, "error: replay: "));
  CHECK(Contains(replay.err, "not from program `racy_sum`"));
  CHECK_FALSE(std::filesystem::exists(replayed));  // the program never ran
}

TEST_CASE("replay refuses a damaged or unreadable reference", "[replay]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(RecordRun(reference, PROG_MANY_OPS, "").status == 0);
  const std::string replayed = (dir / "new.ndt").string();
  SECTION("a flipped byte in the body") {
    std::string bytes = Slurp(reference);
    REQUIRE(bytes.size() > 4096);
    bytes[bytes.size() / 2] ^= 0x5a;
    std::ofstream(reference, std::ios::binary | std::ios::trunc) << bytes;
    const RunResult replay = Run(kNdtrace + " replay '" + reference + "' -o '" + replayed +
                                 "' -- '" PROG_MANY_OPS "'");
    INFO(replay.out << replay.err);
    CHECK(replay.status == 2);
    CHECK(Contains(replay.err, "error: replay: "));
    CHECK(Contains(replay.err, "damaged trace"));
    CHECK_FALSE(std::filesystem::exists(replayed));
  }
  SECTION("not a trace") {
    std::ofstream(reference, std::ios::binary | std::ios::trunc) << "not a trace at all\n";
    const RunResult replay = Run(kNdtrace + " replay '" + reference + "' -o '" + replayed +
                                 "' -- '" PROG_MANY_OPS "'");
    INFO(replay.out << replay.err);
    CHECK(replay.status == 2);
    CHECK(Contains(replay.err, "error: replay: "));
    CHECK_FALSE(std::filesystem::exists(replayed));
  }
}

TEST_CASE("replay reports a choice it forced over the program's own request, with both",
          "[replay]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(RecordRun(reference, PROG_CONV_LEGACY, "").status == 0);
  // The same program asking for another backward-filter algorithm: replay forces the
  // reference's, and the outputs agree, but the program did not do what the reference did.
  const RunResult replay = Run(kNdtrace + " replay '" + reference + "' -o '" +
                               (dir / "new.ndt").string() + "' -- '" PROG_CONV_LEGACY "' --algo 1");
  INFO(replay.out << replay.err);
  CHECK(replay.status == 1);
  CHECK(Contains(replay.out, "error[algorithm_selection]"));
  CHECK(Contains(replay.out, "the program asked for another algorithm in run B"));
  CHECK(Contains(replay.out,
                 "run B asked for cudnn CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, forced "
                 "to cudnn CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0"));
}
