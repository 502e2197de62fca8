// `ndtrace check` verdicts on programs shaped like real training processes (issue "Verdicts you
// can trust"): threads that race to the driver, a caching allocator that hands blocks out in
// varying order, events from a pool; a racing kernel whose data reaches the host only through
// an asynchronous copy; programs that fail, or refuse a launch, or exit differently.
#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
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

TEST_CASE("check: threads whose scratch tensors get freed ranges back in racing order agree",
          "[verdict]") {
  // --empty-cache: every worker cudaMallocs and cudaFrees a scratch tensor of the same size each
  // iteration, and the driver hands a freed range out again to whichever thread asks next.
  ndt::testing::TempDir dir;
  for (int check = 0; check < 2; ++check) {
    const RunResult result =
        Run("NDT_STANDIN_FREE_RETURN_US=200 " + kNdtrace + " check -n 4 -o '" +
            (dir / std::to_string(check)).string() + "' -- '" PROG_THREAD_STREAMS "' --empty-cache");
    INFO(result.out << result.err);
    REQUIRE(result.status == 0);
    CHECK_THAT(result.out, Catch::Contains("ndtrace check: deterministic: 4 runs gave "
                                           "bitwise-identical results"));
  }
}

TEST_CASE("every device pointer names the allocation live at its address when ranges are reused",
          "[verdict]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "reuse.ndt").string();
  // Each free returns 200 us after its range is free (NDT_STANDIN_FREE_RETURN_US): another
  // thread's allocation of the range always comes before the freeing thread is back.
  const RunResult run = Run("NDT_STANDIN_FREE_RETURN_US=200 " + kNdtrace + " record -o '" + trace +
                            "' -- '" PROG_THREAD_STREAMS "' --empty-cache --iterations 12");
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);

  // Each allocation's range and life in op sequence: allocated before op `from`, freed before
  // op `to` (never: UINT64_MAX).
  struct Life {
    uint64_t base = 0, bytes = 0, from = 0, to = UINT64_MAX;
  };
  std::map<uint64_t, Life> lives;
  std::map<uint64_t, int> allocations_at;  // how many allocations each base address had
  const std::vector<Record> records = ReadAll(trace);
  for (const Record& record : records) {
    const auto* event = std::get_if<ndt::format::AllocationRecord>(&record);
    if (event == nullptr) continue;
    Life& life = lives[event->allocation_id];
    if (event->event == ndt::format::AllocationEvent::kAllocate) {
      life.base = event->raw_address;
      life.bytes = event->bytes;
      life.from = event->before_op;
      ++allocations_at[event->raw_address];
    } else if (event->event == ndt::format::AllocationEvent::kFree) {
      life.to = event->before_op;
    }
  }
  const bool reused = std::any_of(allocations_at.begin(), allocations_at.end(),
                                  [](const auto& entry) { return entry.second > 1; });
  REQUIRE(reused);  // else this test would check nothing the fresh-address tests do not

  // Each free names an allocation made at its address and not freed before.
  std::set<uint64_t> freed;
  for (const Record& record : records) {
    const auto* event = std::get_if<ndt::format::AllocationRecord>(&record);
    if (event == nullptr || event->event != ndt::format::AllocationEvent::kFree) continue;
    INFO("free of a" << event->allocation_id << " at 0x" << std::hex << event->raw_address);
    CHECK(lives[event->allocation_id].base == event->raw_address);
    CHECK(freed.insert(event->allocation_id).second);
  }

  size_t checked = 0;
  const auto check_pointer = [&](const OpRecord& op, const DevicePointer& pointer) {
    INFO("op " << op.sequence << " " << op.name << ": a" << pointer.allocation_id << "+"
               << pointer.offset << " at 0x" << std::hex << pointer.raw_address);
    // Every pointer this program gives a kernel or a memset is into device memory it allocated
    // (a copy's host side is not).
    if (op.kind == ndt::format::OpKind::kKernelLaunch || op.kind == ndt::format::OpKind::kMemset) {
      REQUIRE(pointer.allocation_id != 0);
    } else if (pointer.allocation_id == 0) {
      return;
    }
    const auto named = lives.find(pointer.allocation_id);
    REQUIRE(named != lives.end());
    const Life& life = named->second;
    CHECK(life.base + pointer.offset == pointer.raw_address);
    CHECK(pointer.offset < life.bytes);
    CHECK(life.from <= op.sequence);
    CHECK(op.sequence < life.to);
    // No other allocation surely alive at this op (its allocation and free both strictly
    // around it: records of one op's window on two threads come in no set order) holds it.
    for (const auto& [id, other] : lives) {
      if (id == pointer.allocation_id || !(other.from < op.sequence && op.sequence < other.to)) {
        continue;
      }
      CHECK_FALSE((other.base <= pointer.raw_address &&
                   pointer.raw_address < other.base + other.bytes));
    }
    ++checked;
  };
  for (const OpRecord& op : Ops(records)) {
    for (const auto& argument : op.args) {
      if (const auto* pointer = std::get_if<DevicePointer>(&argument.value)) {
        check_pointer(op, *pointer);
      }
    }
    for (const auto& buffer : op.inputs) check_pointer(op, buffer.pointer);
    for (const auto& buffer : op.outputs) check_pointer(op, buffer.pointer);
  }
  CHECK(checked > 400);
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

TEST_CASE("check notes output that differs though the GPU work agreed, times and addresses aside",
          "[verdict]") {
  ndt::testing::TempDir dir;
  // vector_add prints how long its streams took: a time, which differs in every run.
  const RunResult plain = Check((dir / "plain").string(), "-n 2", "'" PROG_VECTOR_ADD "'");
  INFO(plain.out << plain.err);
  CHECK(plain.status == 0);
  CHECK_THAT(plain.out, !Catch::Contains("output differed"));
  // A result line that differs (here the shell's process id) is said, though the verdict on the
  // GPU work stands.
  const RunResult noted = Check((dir / "noted").string(), "-n 2",
                                "sh -c \"'" PROG_VECTOR_ADD "'; echo result \\$\\$\"");
  INFO(noted.out << noted.err);
  CHECK(noted.status == 0);
  CHECK_THAT(noted.out, Catch::Contains("note: the program's output differed between run 1 and "
                                        "run 2") &&
                            Catch::Contains("  run 1: result ") &&
                            Catch::Contains("; but the program's output differed between run 1 "
                                            "and run 2: see the note above"));
}

TEST_CASE("check in a directory of an earlier check compares only the new runs' processes",
          "[verdict]") {
  ndt::testing::TempDir dir;
  // The CUDA work is in the shell's child: each run's trace is a companion, run-N.ndt.<pid>.
  const std::string command = "sh -c \"'" PROG_VECTOR_ADD "'\"";
  const RunResult first = Check(dir.path().string(), "-n 2", command);
  const RunResult second = Check(dir.path().string(), "-n 2", command);
  INFO(first.out << first.err << second.out << second.err);
  REQUIRE(first.status == 0);
  CHECK(second.status == 0);
  // The same ops each time: the first check's companions were not taken for the second's.
  const auto ops = [](const std::string& out) {
    const size_t at = out.find("bitwise-identical results (");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(')', at) - at);
  };
  CHECK_FALSE(ops(first.out).empty());
  CHECK(ops(second.out) == ops(first.out));
}

TEST_CASE("bisect of a program whose GPU work is all in a child process says so", "[verdict]") {
  ndt::testing::TempDir dir;
  const RunResult result =
      Run(kNdtrace + " bisect -o '" + dir.path().string() + "' -- sh -c \"'" PROG_VECTOR_ADD "'\"");
  INFO(result.out << result.err);
  CHECK(result.status == 2);
  CHECK_THAT(result.err, Catch::Contains("error: bisect: run 1 made its GPU calls in 1 other "
                                         "process(es) it started") &&
                             Catch::Contains("`ndtrace check` compares every process"));
}
