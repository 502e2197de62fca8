// GPU time from CUPTI (tracer/gpu_time.h) on the stand-in device and its stand-in libcupti
// (tests/standin/standin_cupti.cc): every kernel, copy and memset a program starts is recorded
// with its GPU start and end, tied to the op that started it, a library's kernels to the library
// op; `--no-gpu-time` turns it off; the Perfetto export draws GPU tracks from it. The stand-in
// CUPTI ties work to calls as the H200's did (a program's launches through cudart carry the
// runtime call's correlation id, external ids are written only with API records and are those
// pushed when the call began): without the RUNTIME and DRIVER kinds no activity would be tied to
// its op, and with the op's own id pushed in its hook each runtime call's work would be tied to
// the thread's previous op (the kind check below).
#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::GpuActivityKind;
using ndt::format::GpuActivityRecord;
using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::format::Record;
using ndt::format::TracerNote;

std::vector<GpuActivityRecord> Activities(const std::vector<Record>& records) {
  std::vector<GpuActivityRecord> activities;
  for (const Record& record : records) {
    if (const auto* a = std::get_if<GpuActivityRecord>(&record)) activities.push_back(*a);
  }
  return activities;
}

std::string GpuTimeNote(const std::vector<Record>& records) {
  for (const Record& record : records) {
    const auto* note = std::get_if<TracerNote>(&record);
    if (note != nullptr && note->text.rfind("GPU time: ", 0) == 0) return note->text;
  }
  return "";
}

// The counts of the closing note "GPU time: N activities, T tied to ops, O ndtrace's own, U
// without a correlation record; ...": {N, T, O, U}, or empty when there is none.
std::vector<uint64_t> GpuTimeCounts(const std::vector<Record>& records) {
  static const std::regex counts(
      R"(GPU time: (\d+) activities, (\d+) tied to ops, (\d+) ndtrace's own, (\d+) without a correlation record;)");
  for (const Record& record : records) {
    const auto* note = std::get_if<TracerNote>(&record);
    std::smatch match;
    if (note == nullptr || !std::regex_search(note->text, match, counts)) continue;
    return {std::stoull(match[1]), std::stoull(match[2]), std::stoull(match[3]),
            std::stoull(match[4])};
  }
  return {};
}

uint64_t UnsignedArg(const OpRecord& op, const std::string& name) {
  for (const auto& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* value = std::get_if<uint64_t>(&argument.value)) return *value;
  }
  return 0;
}

// `ndtrace record` of `command` (quoted program and arguments) into `trace`, the stand-in's
// streams asynchronous.
RunResult RecordAsync(const std::string& trace, const std::string& flags,
                      const std::string& command, const std::string& environment = "") {
  return Run(environment + "NDT_STANDIN_ASYNC=1 '" + NDTRACE_BIN + "' record " + flags + "-o '" +
             trace + "' -- " + command);
}

// A program with a CUPTI client of its own (`command`, and with `--early` starting its profiler
// before its first CUDA call) counts all its work under ndtrace, printing `counted` (`early`):
// GPU time stops when the program registers, or never starts.
void CheckOwnCuptiClient(const std::string& trace, const std::string& command,
                         const std::string& counted, const std::string& counted_early) {
  for (const bool early : {false, true}) {
    INFO(command << (early ? " --early" : ""));
    const RunResult run = RecordAsync(trace, "", command + (early ? " --early" : ""));
    CHECK(run.status == 0);  // every buffer CUPTI handed back was the program's own
    CHECK(Contains(run.out, (early ? counted_early : counted) + "\n"));
    const std::vector<Record> records = ReadAll(trace);
    if (early) {
      CHECK(GpuTimeNote(records).rfind("GPU time: off (the program uses CUPTI's activity API", 0) ==
            0);
      CHECK(Activities(records).empty());
    } else {
      CHECK(GpuTimeNote(records).rfind("GPU time: on", 0) == 0);
      bool stopped = false;
      for (const Record& record : records) {
        const auto* note = std::get_if<TracerNote>(&record);
        stopped |= note != nullptr &&
                   Contains(note->text, "GPU time: off from here: the program registered CUPTI");
      }
      CHECK(stopped);
    }
  }
  std::remove(trace.c_str());
}

TEST_CASE("every kernel, copy and memset gets its GPU time, tied to its op", "[tracer][gpu_time]") {
  // With the digest window on, ndtrace's digest kernels run from inside the program's runtime
  // calls and carry their correlation ids: they must not count as the ops' own. On the CPU path
  // its digests' copies to the host carry them too (a device-to-device copy op would get two
  // copies), and the pin-memory thread's device-to-host copies still count as the program's.
  const auto [environment, flags] = GENERATE(
      std::pair{std::string(""), std::string("")},
      std::pair{std::string(""), std::string("--digest-window 0: ")},
      std::pair{std::string("NDTRACE_DIGEST_DEVICE=cpu "), std::string("--digest-window 0: ")});
  INFO(environment << "record " << flags);
  const std::string trace = TempPath("gpu_time.ndt");
  const RunResult run =
      RecordAsync(trace, flags, std::string("'") + CORPUS_TRAIN_LOOP + "'", environment);
  REQUIRE(run.status == 0);
  const std::vector<Record> records = ReadAll(trace);
  CHECK(GpuTimeNote(records).rfind("GPU time: on", 0) == 0);
  std::map<uint64_t, OpRecord> ops;
  for (const OpRecord& op : Ops(records)) ops[op.sequence] = op;
  std::map<uint64_t, int> timed;  // op -> activities
  uint64_t own = 0;
  for (const GpuActivityRecord& activity : Activities(records)) {
    CHECK(activity.start_ns <= activity.end_ns);
    if (activity.ndtrace_own) {  // its digest kernels, its copies: marked so, and no op's
      ++own;
      CHECK_FALSE(activity.op_sequence);
      CHECK_FALSE(activity.library_op_sequence);
      continue;
    }
    REQUIRE(activity.op_sequence);
    const auto op = ops.find(*activity.op_sequence);
    REQUIRE(op != ops.end());
    ++timed[op->first];
    const OpKind expected = activity.kind == GpuActivityKind::kKernel ? OpKind::kKernelLaunch
                            : activity.kind == GpuActivityKind::kMemcpy ? OpKind::kMemcpy
                                                                        : OpKind::kMemset;
    CHECK(op->second.kind == expected);
    // The GPU starts the work after the call that enqueued it began (the clocks are mapped at
    // start; allow for the mapping's error).
    CHECK(activity.start_ns + 50'000 >= op->second.start_ns);
  }
  int expected = 0;
  for (const auto& [sequence, op] : ops) {
    const bool work = op.kind == OpKind::kKernelLaunch || op.kind == OpKind::kMemset ||
                      (op.kind == OpKind::kMemcpy && UnsignedArg(op, "bytes") != 0);
    if (!work || op.status != 0) continue;
    ++expected;
    INFO("op " << sequence << " " << op.name);
    CHECK(timed[sequence] == 1);  // its own work, once; ndtrace's digests are no op's
  }
  CHECK(expected > 50);
  // Every activity is an op's or ndtrace's own (its digest kernels, the CPU path's copies), and
  // none waited for a correlation record that never came (ndtrace's own copies used to).
  const std::vector<uint64_t> counts = GpuTimeCounts(records);
  REQUIRE(counts.size() == 4);
  CHECK(counts[1] + counts[2] == counts[0]);
  CHECK(counts[3] == 0);
  CHECK(counts[1] == static_cast<uint64_t>(expected));
  CHECK(counts[2] == own);  // each of ndtrace's own marked as such in the trace
  CHECK(own > 0);           // the exit digest's, at least
  std::remove(trace.c_str());
}

TEST_CASE("a library's kernels are timed as its op's", "[tracer][gpu_time]") {
  const std::string trace = TempPath("gpu_time_library.ndt");
  REQUIRE(RecordRun(trace, PROG_CONV_LEGACY).status == 0);
  const std::vector<Record> records = ReadAll(trace);
  std::map<uint64_t, uint64_t> gpu_ns;  // library op -> GPU ns
  for (const GpuActivityRecord& activity : Activities(records)) {
    if (activity.library_op_sequence) {
      gpu_ns[*activity.library_op_sequence] += activity.end_ns - activity.start_ns;
    }
  }
  int convolutions = 0;
  for (const OpRecord& op : Ops(records)) {
    if (op.kind != OpKind::kCudnnConvolution) continue;
    ++convolutions;
    INFO(op.name);
    CHECK(gpu_ns.count(op.sequence) == 1);
  }
  CHECK(convolutions >= 3);

  // A GEMM's work is its own launch's (made inside the call) and the cuBLAS op's; the stand-in
  // cuBLAS also reports its host computation as a kernel no launch started, which must not go to
  // the op the thread makes next: no op gets two activities.
  REQUIRE(RecordAsync(trace, "", std::string("'") + CORPUS_BLAS_THREADS + "'").status == 0);
  std::map<uint64_t, int> per_op;
  int library_work = 0;
  for (const GpuActivityRecord& activity : Activities(ReadAll(trace))) {
    if (activity.op_sequence) ++per_op[*activity.op_sequence];
    library_work += activity.library_op_sequence.has_value();
  }
  CHECK(library_work > 0);
  for (const auto& [sequence, count] : per_op) {
    INFO("op " << sequence);
    CHECK(count == 1);
  }
  std::remove(trace.c_str());
}

TEST_CASE("a program that is a CUPTI client of its own counts its kernels under ndtrace",
          "[tracer][gpu_time]") {
  // As torch.profiler's Kineto: registering its buffers after CUDA work (GPU time stops there)
  // or before the first CUDA call, as a profiler around a whole run (GPU time never starts).
  CheckOwnCuptiClient(TempPath("gpu_time_client.ndt"), std::string("'") + PROG_CUPTI_CLIENT + "'",
                      "cupti kernels 5", "cupti kernels 6");
}

TEST_CASE(
    "a CUPTI client in a library loaded with dlopen(RTLD_LOCAL) counts its work under ndtrace",
    "[tracer][gpu_time]") {
  // As Python loads PyTorch and the libcupti Kineto links: libcupti is in no global scope, and
  // ndtrace's interposed cuptiActivityRegisterCallbacks must still reach it.
  CheckOwnCuptiClient(TempPath("gpu_time_module.ndt"),
                      std::string("'") + PROG_CUPTI_LOADER + "' '" + CUPTI_MODULE + "'",
                      "cupti memsets 5", "cupti memsets 6");
}

TEST_CASE("a recording with --no-gpu-time has no GPU time and says so", "[tracer][gpu_time]") {
  const std::string trace = TempPath("gpu_time_off.ndt");
  REQUIRE(RecordRun(trace, PROG_VECTOR_ADD, "--no-gpu-time").status == 0);
  const std::vector<Record> records = ReadAll(trace);
  CHECK(Activities(records).empty());
  CHECK(GpuTimeNote(records) == "GPU time: off (NDTRACE_GPU_TIME=0)");
  std::remove(trace.c_str());
}

TEST_CASE("the Perfetto export has GPU tracks with GPU times, and says when it has none",
          "[tracer][gpu_time]") {
  const std::string trace = TempPath("gpu_time_export.ndt");
  const std::string json = TempPath("gpu_time_export.json");
  for (const bool gpu_time : {true, false}) {
    REQUIRE(RecordRun(trace, PROG_CONV_LEGACY, gpu_time ? "" : "--no-gpu-time").status == 0);
    REQUIRE(Run(std::string("'") + NDTRACE_BIN + "' export '" + trace +
                "' --format perfetto -o '" + json + "'")
                .status == 0);
    const std::string text = Slurp(json);
    INFO("GPU time " << gpu_time);
    CHECK(Contains(text, "· host call times") );
    CHECK(Contains(text, "\"cat\":\"gpu_kernel\"") == gpu_time);
    CHECK(Contains(text, "· GPU\"") == gpu_time);
    CHECK(Contains(text, "no GPU times in this trace") == !gpu_time);
  }
  std::remove(trace.c_str());
  std::remove(json.c_str());
}

TEST_CASE("run --report says what determinism costs in GPU time, in text and JSON",
          "[tracer][gpu_time]") {
  const std::string json = TempPath("cost.json");
  const RunResult run = Run(std::string("'") + NDTRACE_BIN + "' run --deterministic --report " +
                            "--report-json '" + json + "' -- '" + PROG_CONV_LEGACY + "'");
  REQUIRE(run.status == 0);
  // The program's output is its policy run's, once.
  size_t checksums = 0;
  for (const std::string& line : Lines(run.out)) checksums += line.rfind("checksum ", 0) == 0;
  CHECK(checksums == 1);
  CHECK(Contains(run.err, "ndtrace: cost of determinism (GPU time"));
  CHECK(Contains(run.err, "ndtrace:   cudnnConvolutionBackwardFilter (1 replaced op): "));
  CHECK(Contains(run.err, "ndtrace:   whole run: "));
  const std::string document = Slurp(json);
  CHECK(Contains(document, "\"schema\":\"ndtrace.cost/1\""));
  CHECK(Contains(document, "\"measured\":true"));
  CHECK(Contains(document, "\"name\":\"cudnnConvolutionBackwardFilter\""));
  std::remove(json.c_str());
}

}  // namespace
