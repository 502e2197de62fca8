// The tracer and the traced process's life: forked workers, SIGKILL at random moments, and
// --strict when recording has failed. Programs run on the stand-in device.
#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

const std::string kNdtrace = "'" NDTRACE_BIN "'";
const std::string kWorkers = "'" PROG_WORKERS "'";

std::vector<std::string> FilesIn(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("fork: a CUDA worker gets its own complete trace, a host-only worker none",
          "[process]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "w.ndt").string();
  const RunResult plain = Run(kWorkers + " --cuda-child");
  REQUIRE(plain.status == 0);
  const RunResult run = Run(kNdtrace + " record -o '" + trace + "' -- " + kWorkers + " --cuda-child");
  REQUIRE(run.status == 0);
  CHECK(run.out == plain.out);
  // The parent's trace and the CUDA worker's (forked before CUDA was initialised, it exits with
  // _exit): two files. The host-only worker (forked after) made no CUDA call: none.
  const std::vector<std::string> files = FilesIn(dir.path());
  REQUIRE(files.size() == 2);
  CHECK(files[0] == "w.ndt");
  CHECK(files[1].rfind("w.ndt.", 0) == 0);
  std::vector<std::vector<std::string>> names;
  for (const std::string& file : files) {
    const std::vector<Record> records = ReadAll((dir / file).string());  // checks complete()
    std::vector<std::string> ops;
    for (const OpRecord& op : Ops(records)) ops.push_back(op.name.substr(0, op.name.find('(')));
    names.push_back(ops);
  }
  // Both ran the same loop: the same ops.
  CHECK(names[0] == names[1]);
  CHECK(std::count(names[0].begin(), names[0].end(), "Step") == 8);
}

TEST_CASE("SIGKILL at 20 random moments leaves readable, incomplete traces", "[process]") {
  ndt::testing::TempDir dir;
  std::mt19937 random(20261121);  // fixed: the same moments every run of the test
  std::uniform_int_distribution<int> delay_ms(0, 600);
  int with_ops = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::string trace = (dir / ("k" + std::to_string(attempt) + ".ndt")).string();
    const int delay = delay_ms(random);
    INFO("attempt " << attempt << ", killed after " << delay << " ms");
    const std::string command = "env LD_PRELOAD='" NDT_TRACER_LIB "' NDTRACE_OUTPUT='" + trace +
                                "' NDTRACE_QUIET=1 " + kWorkers +
                                " --iterations 100000000 & pid=\\$!; sleep " +
                                std::to_string(delay / 1000.0) + "; kill -9 \\$pid; wait \\$pid";
    const RunResult run = Run("sh -c \"" + command + "\"");
    CHECK(run.status == 128 + 9);
    if (!std::filesystem::exists(trace)) continue;  // killed before its first CUDA call
    auto reader = ndt::format::TraceReader::Open(trace);
    REQUIRE(reader.ok());
    CHECK_FALSE((*reader)->complete());
    Record record;
    uint64_t next = 0;
    bool dense = true;
    while ((*reader)->Next(&record)) {
      if (const auto* op = std::get_if<OpRecord>(&record)) {
        dense = dense && op->sequence == next;
        ++next;
      }
    }
    // Whole chunks only: a prefix of the op stream, nothing damaged.
    CHECK(dense);
    CHECK((*reader)->damage().empty());
    if (next > 0) ++with_ops;
  }
  // Most moments fall after the first flush: the check above is not vacuous.
  CHECK(with_ops >= 10);
}

TEST_CASE("the trace is complete when the process ends by SIGTERM, a crash or exec",
          "[process]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "t.ndt").string();
  const std::string preload =
      "env LD_PRELOAD='" NDT_TRACER_LIB "' NDTRACE_OUTPUT='" + trace + "' NDTRACE_QUIET=1 ";
  SECTION("SIGTERM") {
    const std::string command = preload + kWorkers +
                                " --iterations 100000000 & pid=\\$!; sleep 0.3; kill -TERM \\$pid; "
                                "wait \\$pid";
    CHECK(Run("sh -c \"" + command + "\"").status == 128 + 15);
  }
  SECTION("SIGSEGV") {
    CHECK(Run("sh -c \"" + preload + kWorkers + " --crash; echo status \\$?\"").out.find(
              "status 139") != std::string::npos);
  }
  SECTION("exec") {
    const RunResult run = Run(preload + kWorkers + " --then-exec /bin/true");
    CHECK(run.status == 0);
    CHECK(run.out.find("checksum") != std::string::npos);
  }
  auto reader = ndt::format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  CHECK((*reader)->complete());
  const std::vector<Record> records = ReadAll(trace);
  CHECK(Ops(records).size() >= 3);
}

TEST_CASE("strict mode: when recording fails, CUDA calls fail instead of passing through",
          "[process]") {
  for (const std::string& how : {"env NDTRACE_STRICT=1 " + kNdtrace + " record",
                                 kNdtrace + " record --strict"}) {
    INFO(how);
    const RunResult strict = Run(how + " -o /nonexistent/dir/x.ndt -- " + kWorkers);
    CHECK(strict.status != 0);
    CHECK(strict.out.find("checksum") == std::string::npos);
    CHECK(strict.err.find("ndtrace: cannot record: ") != std::string::npos);
  }
  // The same without --strict: the program runs as if untraced.
  const RunResult lenient =
      Run(kNdtrace + " record -o /nonexistent/dir/x.ndt -- " + kWorkers);
  CHECK(lenient.status == 0);
  CHECK(lenient.out == Run(kWorkers).out);
}
