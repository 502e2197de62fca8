// `ndtrace bisect -- CMD...` end to end on the stand-in device: it names the racing launch
// planted among 10,000 ops within ceil(log2 N) + 3 program runs (the run that captures it for
// standalone replay included), confirms that it varies when replayed alone, and says when no
// run diverges; once the runs differ in a narrow window, it records that window once and replays
// it from the trace instead of re-running the program.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <string>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

const std::string kNdtrace = "'" NDTRACE_BIN "'";

int CeilLog2(uint64_t n) {
  int bits = 0;
  while ((uint64_t{1} << bits) < n) ++bits;
  return bits;
}

}  // namespace

TEST_CASE("bisect names the racing op planted among 10,000 ops in ceil(log2 N) + 3 runs",
          "[bisect]") {
  ndt::testing::TempDir dir;
  const std::string out = (dir / "bisect").string();
  // Iteration 6137 of 10,000: op 3 + 6137. Per-op digest runs of the program, no window replay.
  const RunResult bisect = Run(kNdtrace + " bisect --window-replays 0 -o '" + out +
                               "' -- '" PROG_MANY_OPS "' 10000 6137");
  INFO(bisect.out << bisect.err);
  REQUIRE(bisect.status == 1);
  CHECK(bisect.out.find("nondeterministic_op") != std::string::npos);
  const std::regex found(
      R"(op (\d+) (\S*RacySum\S*)[^\n]*\(nondeterministic_op\) found in (\d+) program runs )"
      R"(\(N = (\d+) ops: ceil\(log2 N\) = (\d+)\))");
  std::smatch match;
  REQUIRE(std::regex_search(bisect.out, match, found));
  const uint64_t op = std::stoull(match[1]);
  const int runs = std::stoi(match[3]);
  const uint64_t ops = std::stoull(match[4]);
  CHECK(op == 3 + 6137);
  CHECK(ops >= 10000);
  CHECK(std::stoi(match[5]) == CeilLog2(ops));
  CHECK(runs <= CeilLog2(ops) + 3);

  // The op named is the RacySum launch of the first run's trace.
  std::vector<OpRecord> all = Ops(ReadAll(out + "/run-1.ndt"));
  REQUIRE(all.size() == ops);
  CHECK(all[op].kind == ndt::format::OpKind::kKernelLaunch);
  CHECK(all[op].name.find("RacySum") != std::string::npos);
  for (const OpRecord& other : all) {
    if (other.sequence != op) CHECK(other.name.find("RacySum") == std::string::npos);
  }

  // The last run captured that op alone, and replaying it 10 times gave several outputs.
  const std::regex confirmed(
      R"(ndtrace bisect: confirmed: op (\d+) varies when replayed alone \((\d+) distinct )"
      R"(outputs in 10 runs\))");
  REQUIRE(std::regex_search(bisect.out, match, confirmed));
  CHECK(std::stoull(match[1]) == op);
  CHECK(std::stoi(match[2]) >= 2);
  const std::vector<OpRecord> captured =
      Ops(ReadAll(out + "/run-" + std::to_string(runs) + ".ndt"));
  REQUIRE(captured.size() == ops);
  for (const OpRecord& other : captured) {
    bool blobs = false;
    for (const ndt::format::Argument& argument : other.args) {
      blobs = blobs || argument.name.rfind("blob:in:", 0) == 0;
    }
    CHECK(blobs == (other.sequence == op));
  }
}

TEST_CASE(
    "bisect records the window it narrowed to once and replays it from the trace instead of "
    "re-running the program",
    "[bisect][window_replay]") {
  ndt::testing::TempDir dir;
  const std::string out = (dir / "bisect").string();
  const RunResult bisect =
      Run(kNdtrace + " bisect -o '" + out + "' -- '" PROG_MANY_OPS "' 10000 6137");
  INFO(bisect.out << bisect.err);
  REQUIRE(bisect.status == 1);
  // Run 1 counts, runs 2 and 3 (state digests) find the window, run 4 records it captured; the
  // window replay names the op and confirms it: no per-op digest runs, no confirmation run.
  const std::regex found(
      R"(op 6140 RacySum[^\n]*\(nondeterministic_op\) found in 4 program runs \(N = \d+ ops: )"
      R"(ceil\(log2 N\) = \d+\) and 1 window replay;)");
  CHECK(std::regex_search(bisect.out, found));
  const std::regex confirmed(
      R"(ndtrace bisect: confirmed: op 6140 varies when its window \(ops (\d+)\.\.(\d+)\) is )"
      R"(replayed from the trace \((\d+) distinct outputs in 5 runs\))");
  std::smatch match;
  REQUIRE(std::regex_search(bisect.out, match, confirmed));
  const uint64_t first = std::stoull(match[1]), last = std::stoull(match[2]);
  CHECK(first <= 6140);
  CHECK(last >= 6140);
  CHECK(last - first + 1 <= 4096);
  CHECK(std::stoi(match[3]) >= 2);
  CHECK(bisect.out.find("per-op digests") == std::string::npos);
  // Run 4 captured exactly the window's ops.
  for (const OpRecord& op : Ops(ReadAll(out + "/run-4.ndt"))) {
    bool blobs = false;
    for (const ndt::format::Argument& argument : op.args) {
      blobs = blobs || argument.name.rfind("blob:", 0) == 0;
    }
    if (op.kind == ndt::format::OpKind::kKernelLaunch) {
      CHECK(blobs == (op.sequence >= first && op.sequence <= last));
    } else if (blobs) {
      CHECK((op.sequence >= first && op.sequence <= last));
    }
  }
  CHECK_FALSE(std::filesystem::exists(out + "/run-5.ndt"));
}

TEST_CASE("bisect --confirm-runs 0 names the op without a confirmation run", "[bisect]") {
  ndt::testing::TempDir dir;
  const std::string out = (dir / "bisect").string();
  const RunResult bisect = Run(kNdtrace + " bisect --confirm-runs 0 -o '" + out + "' -- '" +
                               PROG_MANY_OPS "' 3000 1500");
  INFO(bisect.out << bisect.err);
  REQUIRE(bisect.status == 1);
  CHECK(bisect.out.find("op 1503 RacySum") != std::string::npos);
  CHECK(bisect.out.find("confirmed") == std::string::npos);
  CHECK(bisect.out.find("found in 3 program runs") != std::string::npos);  // 1 + 2, no capture
}

TEST_CASE("bisect of a deterministic program reports no divergence", "[bisect]") {
  ndt::testing::TempDir dir;
  const RunResult bisect = Run(kNdtrace + " bisect -n 2 -o '" + (dir / "b").string() +
                               "' -- '" PROG_MANY_OPS "' 2000 -1");
  INFO(bisect.out << bisect.err);
  CHECK(bisect.status == 0);
  CHECK(bisect.out.find("no divergence") != std::string::npos);
  CHECK(bisect.out.find("3 program runs") != std::string::npos);
}

TEST_CASE("bisect refuses a command line without --", "[bisect]") {
  const RunResult bisect = Run(kNdtrace + " bisect '" PROG_MANY_OPS "'");
  CHECK(bisect.status == 2);
  CHECK(bisect.err.find("error: bisect: put `--` before the command") != std::string::npos);
}

TEST_CASE("bisect says why it cannot confirm an op standalone replay does not re-execute, "
          "without a capture run",
          "[bisect]") {
  ndt::testing::TempDir dir;
  // allreduce's ranks race on the reduction order: the culprit is ncclAllReduce, a collective
  // standalone replay cannot run alone.
  const RunResult bisect = Run(kNdtrace + " bisect -o '" + (dir / "b").string() + "' -- '" +
                               PROG_ALLREDUCE "' --ranks 4");
  INFO(bisect.out << bisect.err);
  REQUIRE(bisect.status == 1);
  REQUIRE(bisect.out.find("ncclAllReduce (nondeterministic_op) found in 3 program runs") !=
          std::string::npos);
  CHECK(bisect.out.find("ndtrace bisect: not confirmed: ") != std::string::npos);
  CHECK(bisect.out.find("cannot be replayed alone") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "b" / "run-4.ndt"));
}

TEST_CASE("bisect confirms a cuDNN backend plan by replaying it alone", "[bisect]") {
  ndt::testing::TempDir dir;
  const RunResult bisect =
      Run(kNdtrace + " bisect -o '" + (dir / "b").string() + "' -- '" + PROG_CONV_BACKEND "'");
  INFO(bisect.out << bisect.err);
  REQUIRE(bisect.status == 1);
  CHECK(bisect.out.find("cudnnBackendExecute (nondeterministic_op) found in 4 program runs") !=
        std::string::npos);
  CHECK(bisect.out.find("ndtrace bisect: confirmed: ") != std::string::npos);
}
