// NVTX ranges under `ndtrace record`: the tracer is the program's NVTX injection library
// (tracer/nvtx.h). tests/programs/nvtx_ranges.cu annotates itself with NVTX v3 as real code
// does; its ops must name the ranges that enclosed them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "formats/nvtx_paths.h"
#include "formats/records.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::NvtxEvent;
using ndt::format::NvtxPaths;
using ndt::format::NvtxRangeRecord;
using ndt::format::OpKind;

std::string Checksum(const std::string& out) {
  const size_t at = out.find("checksum ");
  return at == std::string::npos ? "" : out.substr(at, 25);
}

// Every op with the path of the ranges that enclosed it, resolved as a reader does.
std::vector<std::pair<OpRecord, std::vector<std::string>>> OpsWithPaths(
    const std::vector<Record>& records) {
  NvtxPaths paths;
  std::vector<std::pair<OpRecord, std::vector<std::string>>> ops;
  for (const Record& record : records) {
    paths.Observe(record);
    if (const auto* op = std::get_if<OpRecord>(&record)) {
      ops.emplace_back(*op, paths.Resolve(op->nvtx_range_id).path);
    }
  }
  return ops;
}

std::vector<NvtxRangeRecord> Ranges(const std::vector<Record>& records) {
  std::vector<NvtxRangeRecord> ranges;
  for (const Record& record : records) {
    if (const auto* range = std::get_if<NvtxRangeRecord>(&record)) ranges.push_back(*range);
  }
  return ranges;
}

TEST_CASE("every op of an NVTX-annotated program names the ranges that enclosed it on its thread",
          "[tracer][nvtx]") {
  const std::string trace = TempPath("nvtx.ndt");
  const RunResult untraced = Run(std::string("'") + PROG_NVTX_RANGES + "'");
  REQUIRE(untraced.status == 0);
  const RunResult run = RecordRun(trace, PROG_NVTX_RANGES);
  INFO(run.err);
  REQUIRE(run.status == 0);
  CHECK(Checksum(run.out) == Checksum(untraced.out));  // the program is not changed
  const std::vector<Record> records = ReadAll(trace);

  const std::vector<std::string> scale = {"worker 0", "minilib: minilib::scale"};
  const std::vector<std::string> reduce = {"worker 0", "reduce", "minilib: minilib::reduce"};
  std::map<std::string, int> kernels_by_path;
  int worker_ops = 0;
  for (const auto& [op, path] : OpsWithPaths(records)) {
    if (op.thread_id == 0) continue;  // the main thread's ops lie in no push/pop range
    ++worker_ops;
    INFO("op " << op.sequence << " " << op.name << " thread " << op.thread_id);
    REQUIRE(!path.empty());
    CHECK(op.nvtx_range_id >> 32 == op.thread_id);  // ids are per thread
    CHECK(path.front().rfind("worker ", 0) == 0);
    std::vector<std::string> shown = path;
    shown.front() = "worker 0";  // both workers have the same shape
    if (op.kind == OpKind::kKernelLaunch) ++kernels_by_path[ndt::format::JoinPath(shown)];
    if (op.name.rfind("Step(", 0) == 0) CHECK(shown == scale);
    if (op.name.rfind("CorpusRowSum(", 0) == 0) CHECK(shown == reduce);
    if (op.name == "cuMemcpyHtoDAsync_v2")
      CHECK(shown == std::vector<std::string>{"worker 0", "upload"});
    if (op.name == "cuMemsetD8Async") CHECK(shown == reduce);
    if (op.name == "cuMemcpyDtoHAsync_v2") {
      CHECK(shown == std::vector<std::string>{"worker 0", "download"});
    }
  }
  CHECK(worker_ops >= 2 * 2 * 8);  // two steps, two workers, eight ops each
  CHECK(kernels_by_path[ndt::format::JoinPath(scale)] == 4);
  CHECK(kernels_by_path[ndt::format::JoinPath(reduce)] == 4);

  const std::vector<NvtxRangeRecord> ranges = Ranges(records);
  std::set<std::string> pushed, categories, marks;
  std::map<uint64_t, int> start_end;
  int pushes = 0, pops = 0;
  for (const NvtxRangeRecord& range : ranges) {
    switch (range.kind) {
      case NvtxEvent::kPush:
        ++pushes;
        pushed.insert(range.name);
        CHECK(range.range_id >> 32 == range.thread_id);
        if (range.domain == "minilib") CHECK(range.category == 1);  // "compute"
        break;
      case NvtxEvent::kPop:
        ++pops;
        break;
      case NvtxEvent::kCategoryName:
        categories.insert(range.name);
        break;
      case NvtxEvent::kMark:
        marks.insert(range.name);
        break;
      case NvtxEvent::kStart:
        start_end[range.range_id] += 1;
        CHECK(range.name == "run");
        break;
      case NvtxEvent::kEnd:
        start_end[range.range_id] += 2;
        break;
    }
  }
  CHECK(pushes == pops);  // every range written was closed
  CHECK(pushed == std::set<std::string>{"worker 0", "worker 1", "upload", "minilib::scale",
                                        "reduce", "minilib::reduce", "download"});
  // "step N" enclosed no op of its own thread: it costs no record.
  CHECK(categories == std::set<std::string>{"training", "compute", "copy"});
  CHECK(marks == std::set<std::string>{"step done"});
  REQUIRE(start_end.size() == 1);
  CHECK(start_end.begin()->second == 3);  // started and ended, same id

  // show prints each op's ranges under it.
  const RunResult show = Run("'" NDTRACE_BIN "' show --stable '" + trace + "'");
  REQUIRE(show.status == 0);
  CHECK_THAT(show.out,
             Catch::Contains("in \"worker 1\" > \"reduce\" > \"minilib: minilib::reduce\""));
  CHECK_THAT(show.out, Catch::Contains("nvtx t0 mark \"step done\""));
  // Perfetto: push/pop ranges as slices on their thread's track, the run as an async slice.
  const RunResult perfetto = Run("'" NDTRACE_BIN "' export --format perfetto '" + trace + "'");
  REQUIRE(perfetto.status == 0);
  std::istringstream lines(perfetto.out);
  int begins = 0, ends = 0, scale_slices = 0, async = 0, ops_with_ranges = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"ph\":\"B\"") != std::string::npos) ++begins;
    if (line.find("\"ph\":\"E\"") != std::string::npos) ++ends;
    if (line.find("\"ph\":\"B\"") != std::string::npos &&
        line.find("\"name\":\"minilib: minilib::scale\"") != std::string::npos) {
      ++scale_slices;
    }
    if (line.find("\"ph\":\"b\"") != std::string::npos ||
        line.find("\"ph\":\"e\"") != std::string::npos) {
      ++async;
    }
    if (line.find("\"ph\":\"X\"") != std::string::npos &&
        line.find("\"nvtx_ranges\":[\"worker ") != std::string::npos) {
      ++ops_with_ranges;
    }
  }
  CHECK(begins == pushes);
  CHECK(ends == pops);
  CHECK(scale_slices == 4);
  CHECK(async == 2);
  CHECK(ops_with_ranges == worker_ops);
  std::remove(trace.c_str());
}

TEST_CASE("an NVTX injection library already set (another tool's) is chained, not replaced",
          "[tracer][nvtx]") {
  const std::string trace = TempPath("nvtx_chain.ndt");
  const std::string counts = TempPath("nvtx_counts.txt");
  std::remove(counts.c_str());
  const RunResult run =
      Run(std::string("NVTX_INJECTION64_PATH='") + NVTX_COUNTER + "' NVTX_COUNTER_OUT='" + counts +
          "' '" NDTRACE_BIN "' record -o '" + trace + "' -- '" + PROG_NVTX_RANGES + "' --steps 3");
  INFO(run.err);
  REQUIRE(run.status == 0);
  // The other tool saw every range: each step pushes "step N", and each of its two workers
  // four ranges of the default domain and two of the library's.
  CHECK(Slurp(counts) == "pushes 27 pops 27 domain_pushes 12 domains 1\n");
  // And ndtrace recorded them.
  int pushes = 0;
  for (const auto& [op, path] : OpsWithPaths(ReadAll(trace))) {
    if (op.name.rfind("CorpusRowSum(", 0) == 0) {
      ++pushes;
      CHECK(path.size() == 3);
    }
  }
  CHECK(pushes == 6);
  std::remove(trace.c_str());
  std::remove(counts.c_str());
}

}  // namespace
