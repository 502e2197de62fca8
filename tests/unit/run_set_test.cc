// Runs of several processes (replayer/run_set.h): which files belong to a run, their keys, and
// the rank-by-rank comparison. Traces are written through the real writer.
#include "replayer/run_set.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/trace_writer.h"
#include "support/sample_records.h"
#include "support/temp_dir.h"

namespace {

using ndt::format::OpRecord;

// A trace at `path` of a process with `rank` (-1: none) started at `start`, whose one op has an
// output digest `output`.
void WriteProcess(const std::string& path, int32_t rank, uint64_t start, uint64_t output) {
  ndt::format::TraceHeader header = ndt::testing::SampleHeader();
  header.rank = rank;
  header.start_unix_ns = start;
  auto writer = ndt::format::TraceWriter::Create(path, header);
  REQUIRE(writer.ok());
  OpRecord op;
  op.kind = ndt::format::OpKind::kKernelLaunch;
  op.name = "Reduce";
  ndt::format::BufferDigest digest;
  digest.role = "out";
  digest.bytes = 4;
  digest.digest = {output, 1};
  op.outputs = {digest};
  (*writer)->Append(op);
  REQUIRE((*writer)->Close().ok());
}

std::vector<std::string> Keys(const std::vector<ndt::replay::ProcessTrace>& traces) {
  std::vector<std::string> keys;
  for (const auto& trace : traces) keys.push_back(trace.key);
  return keys;
}

}  // namespace

TEST_CASE("a run is its trace and its companions, keyed main, by rank, then by start time",
          "[run_set]") {
  ndt::testing::TempDir dir;
  const std::string run = (dir / "run-1.ndt").string();
  WriteProcess(run, -1, 10, 1);
  WriteProcess(run + ".rank1", 1, 30, 1);
  WriteProcess(run + ".rank0", 0, 40, 1);
  WriteProcess(run + ".977", -1, 50, 1);
  WriteProcess(run + ".12", -1, 20, 1);
  WriteProcess(run + ".rank0.33", 0, 60, 1);  // a child forked by rank 0: same rank, unranked key
  // Not companions: another run, and names that only look alike.
  WriteProcess((dir / "run-10.ndt").string(), -1, 1, 1);
  std::ofstream(run + ".log") << "program output";
  std::ofstream(run + ".rankx") << "?";

  auto traces = ndt::replay::FindProcessTraces(run);
  REQUIRE(traces.ok());
  CHECK(Keys(*traces) ==
        std::vector<std::string>{"main", "rank 0", "rank 1", "process 1", "process 2", "process 3"});
  CHECK((*traces)[3].path == run + ".12");  // started first
  CHECK((*traces)[4].path == run + ".977");
  CHECK((*traces)[5].path == run + ".rank0.33");

  SECTION("a missing main trace leaves the companions") {
    std::filesystem::remove(run);
    auto companions = ndt::replay::FindProcessTraces(run);
    REQUIRE(companions.ok());
    CHECK(Keys(*companions).front() == "rank 0");
  }
  SECTION("a directory holds every trace in it, non-traces skipped") {
    auto all = ndt::replay::FindProcessTraces(dir.path().string());
    REQUIRE(all.ok());
    CHECK(all->size() == 7);
  }
}

TEST_CASE("no trace at all is an error naming the path", "[run_set]") {
  ndt::testing::TempDir dir;
  auto none = ndt::replay::FindProcessTraces((dir / "absent.ndt").string());
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message().find("absent.ndt") != std::string::npos);
  auto empty = ndt::replay::FindProcessTraces(dir.path().string());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().message().find("no trace in this directory") != std::string::npos);
}

TEST_CASE("two runs are compared rank by rank", "[run_set]") {
  ndt::testing::TempDir dir;
  const std::string a = (dir / "a.ndt").string();
  const std::string b = (dir / "b.ndt").string();
  WriteProcess(a + ".rank0", 0, 1, 7);
  WriteProcess(a + ".rank1", 1, 2, 8);
  WriteProcess(b + ".rank1", 1, 3, 9);  // rank 1 diverges; ranks started in another order
  WriteProcess(b + ".rank0", 0, 4, 7);

  auto diff = ndt::replay::DiffRuns(a, b);
  REQUIRE(diff.ok());
  REQUIRE(diff->processes.size() == 2);
  CHECK_FALSE(diff->single());
  CHECK(diff->processes[0].first == "rank 0");
  CHECK(diff->processes[0].second.identical());
  CHECK_FALSE(diff->processes[1].second.identical());
  REQUIRE(diff->first_diverged() != nullptr);
  CHECK(diff->first_diverged()->first == "rank 1");
  CHECK_FALSE(diff->identical());

  const std::string text = ndt::replay::RenderRunDiffText(*diff);
  CHECK(text.find("== rank 0: " + a + ".rank0 vs " + b + ".rank0") != std::string::npos);
  CHECK(text.find("2 processes compared, 1 diverged\n") != std::string::npos);
  const auto json = nlohmann::json::parse(ndt::replay::RenderRunDiffJson(*diff));
  CHECK(json["schema"] == "ndtrace.diff-set/1");
  CHECK(json["identical"] == false);
  CHECK(json["processes"][1]["process"] == "rank 1");
  CHECK(json["processes"][1]["report"]["schema"] == "ndtrace.diff/2");

  SECTION("a rank present in one run only") {
    WriteProcess(b + ".rank2", 2, 5, 7);
    auto extra = ndt::replay::DiffRuns(a, b);
    REQUIRE(extra.ok());
    CHECK(extra->only_in_b == std::vector<std::string>{"rank 2"});
    CHECK(ndt::replay::RenderRunDiffText(*extra).find("== rank 2: in run B only") !=
          std::string::npos);
  }
}

TEST_CASE("one process on each side is a plain diff", "[run_set]") {
  ndt::testing::TempDir dir;
  const std::string a = (dir / "a.ndt").string();
  const std::string b = (dir / "b.ndt").string();
  WriteProcess(a, -1, 1, 7);
  WriteProcess(b, -1, 2, 7);
  auto diff = ndt::replay::DiffRuns(a, b);
  REQUIRE(diff.ok());
  CHECK(diff->single());
  CHECK(diff->identical());
  CHECK(nlohmann::json::parse(ndt::replay::RenderRunDiffJson(*diff))["schema"] ==
        "ndtrace.diff/2");
}
