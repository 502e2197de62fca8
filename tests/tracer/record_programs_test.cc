// End-to-end tests of the tracer: the programs of tests/programs run under `ndtrace record` on
// the stand-in device, and their traces are read back with TraceReader.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::Argument;
using ndt::format::DevicePointer;
using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::format::Record;
using ndt::format::StateDigestRecord;

std::vector<StateDigestRecord> StateDigests(const std::vector<Record>& records) {
  std::vector<StateDigestRecord> states;
  for (const Record& record : records) {
    if (const auto* state = std::get_if<StateDigestRecord>(&record)) states.push_back(*state);
  }
  return states;
}

// The state digest with its time and raw addresses cleared.
StateDigestRecord Masked(StateDigestRecord state) {
  state.time_ns = 0;
  for (auto& digest : state.allocations) digest.pointer.raw_address = 0;
  return state;
}

// Checks that every state digest in `records` (a single-threaded program's, in file order)
// covers exactly the allocations live at that point, whole; returns how many there were.
size_t CheckStateDigestsCoverLiveAllocations(const std::vector<Record>& records) {
  std::map<uint64_t, uint64_t> live;  // allocation id -> bytes
  size_t states = 0;
  for (const Record& record : records) {
    if (const auto* allocation = std::get_if<ndt::format::AllocationRecord>(&record)) {
      if (allocation->event == ndt::format::AllocationEvent::kAllocate) {
        live[allocation->allocation_id] = allocation->bytes;
      } else {
        live.erase(allocation->allocation_id);
      }
    }
    if (const auto* state = std::get_if<StateDigestRecord>(&record)) {
      ++states;
      INFO("state digest after op " << state->after_op << " (" << state->reason << ")");
      std::map<uint64_t, uint64_t> covered;
      for (const auto& digest : state->allocations) {
        CHECK(digest.pointer.offset == 0);
        CHECK(digest.pointer.raw_address != 0);
        covered[digest.pointer.allocation_id] = digest.bytes;
      }
      CHECK(covered == live);
      CHECK(state->allocations.size() == live.size());
    }
  }
  return states;
}

const DevicePointer& PointerArg(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name == name) {
      REQUIRE(std::holds_alternative<DevicePointer>(argument.value));
      return std::get<DevicePointer>(argument.value);
    }
  }
  FAIL("no argument " << name << " in op " << op.name);
  static DevicePointer none;
  return none;
}

}  // namespace

TEST_CASE("vector_add under ndtrace record keeps its output and records every op canonically",
          "[tracer]") {
  const RunResult plain = Run("'" PROG_VECTOR_ADD "'");
  REQUIRE(plain.status == 0);
  const std::string trace = TempPath("vector_add.ndt");
  const RunResult traced = RecordRun(trace, PROG_VECTOR_ADD);
  CHECK(traced.status == 0);
  CHECK(traced.out == plain.out);
  CHECK(traced.err.find("ndtrace: trace written to " + trace + " (28 ops,") != std::string::npos);

  auto reader = ndt::format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->header().gpus.size() == 1);
  CHECK((*reader)->header().gpus[0].simulated);
  CHECK((*reader)->header().gpus[0].name == "ndtrace stand-in device");
  CHECK((*reader)->header().command_line.at(0) == PROG_VECTOR_ADD);

  const std::vector<Record> records = ReadAll(trace);
  const std::vector<OpRecord> ops = Ops(records);
  std::vector<std::string> names;
  for (const OpRecord& op : ops) names.push_back(op.name.substr(0, op.name.find('(')));
  const std::vector<std::string> expected = {
      "cuMemsetD8_v2",        "cuStreamCreateWithPriority", "cuEventCreate",
      "cuEventCreate",        "cuStreamCreateWithPriority", "cuEventCreate",
      "cuEventCreate",        "cuEventRecord",              "cuMemcpyHtoDAsync_v2",
      "cuMemcpyHtoDAsync_v2", "VectorAdd",                  "cuMemcpyDtoHAsync_v2",
      "cuEventRecord",        "cuEventRecord",              "cuMemcpyHtoDAsync_v2",
      "cuMemcpyHtoDAsync_v2", "VectorAdd",                  "cuMemcpyDtoHAsync_v2",
      "cuEventRecord",        "cuStreamSynchronize",        "cuEventDestroy_v2",
      "cuEventDestroy_v2",    "cuStreamDestroy_v2",         "cuStreamSynchronize",
      "cuEventDestroy_v2",    "cuEventDestroy_v2",          "cuStreamDestroy_v2",
      "cuCtxSynchronize_v2"};
  REQUIRE(names == expected);
  for (size_t i = 0; i < ops.size(); ++i) CHECK(ops[i].sequence == i);

  const OpRecord& launch = ops[10];
  CHECK(launch.kind == OpKind::kKernelLaunch);
  CHECK(launch.name == "VectorAdd(float const*, float const*, float*, int)");
  // A module is named by its image's digest (bit 63 set): the same in every run whichever
  // thread loads it first.
  CHECK((launch.module_id >> 63) == 1);
  CHECK(launch.stream_id == 1);
  CHECK(std::get<Argument::Dims>(launch.args.at(0).value) == Argument::Dims{64, 1, 1});
  CHECK(std::get<Argument::Dims>(launch.args.at(1).value) == Argument::Dims{256, 1, 1});
  CHECK(PointerArg(launch, "arg0").allocation_id == 1);
  CHECK(PointerArg(launch, "arg1").allocation_id == 2);
  CHECK(PointerArg(launch, "arg2").allocation_id == 3);
  CHECK(PointerArg(launch, "arg2").offset == 0);
  CHECK(PointerArg(ops[16], "arg2").offset == 32768 * 4);
  CHECK(ops[16].stream_id == 2);
  const Argument& count = launch.args.back();
  REQUIRE(std::holds_alternative<Argument::Bytes>(count.value));
  CHECK(std::get<Argument::Bytes>(count.value).data == std::string("\x00\x80\x00\x00", 4));

  const OpRecord& copy_in = ops[8];
  CHECK(copy_in.kind == OpKind::kMemcpy);
  REQUIRE(copy_in.inputs.size() == 1);
  CHECK(copy_in.inputs[0].bytes == 131072);
  CHECK(copy_in.inputs[0].pointer.allocation_id == 1);
  // Asynchronous copies out are digested when their stream synchronises.
  REQUIRE(ops[19].outputs.size() == 1);
  CHECK(ops[19].outputs[0].role == "dst of op 11");
  CHECK(ops[19].outputs[0].pointer.allocation_id == 3);

  int allocations = 0, frees = 0, modules = 0;
  for (const Record& record : records) {
    if (const auto* allocation = std::get_if<ndt::format::AllocationRecord>(&record)) {
      (allocation->event == ndt::format::AllocationEvent::kAllocate ? allocations : frees)++;
      CHECK(allocation->bytes == 262144);
    }
    if (const auto* module = std::get_if<ndt::format::ModuleLoadRecord>(&record)) {
      ++modules;
      CHECK(module->api == "cuLibraryLoadData");
      CHECK(module->image_bytes > 0);
      CHECK(module->module_id == (module->digest.lo | (uint64_t{1} << 63)));
      CHECK(module->module_id == launch.module_id);
    }
  }
  CHECK(allocations == 3);
  CHECK(frees == 3);
  CHECK(modules == 1);
  std::remove(trace.c_str());
}

TEST_CASE("two recordings of vector_add give identical op streams and output digests", "[tracer]") {
  const std::string first = TempPath("vector_add_1.ndt"), second = TempPath("vector_add_2.ndt");
  REQUIRE(RecordRun(first, PROG_VECTOR_ADD).status == 0);
  REQUIRE(RecordRun(second, PROG_VECTOR_ADD).status == 0);
  std::vector<OpRecord> a = Ops(ReadAll(first)), b = Ops(ReadAll(second));
  REQUIRE(a.size() == b.size());
  size_t output_digests = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("op " << i << " " << a[i].name);
    CHECK(Masked(a[i]) == Masked(b[i]));
    output_digests += a[i].outputs.size();
  }
  CHECK(output_digests == 2);
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST_CASE("recordings of racy_sum give different digests of its output", "[tracer]") {
  std::set<std::pair<uint64_t, uint64_t>> digests;
  const std::string trace = TempPath("racy_sum.ndt");
  for (int run = 0; run < 6 && digests.size() < 2; ++run) {
    REQUIRE(RecordRun(trace, PROG_RACY_SUM).status == 0);
    const std::vector<OpRecord> ops = Ops(ReadAll(trace));
    REQUIRE(!ops.empty());
    const OpRecord& copy_out = ops.back();
    CHECK(copy_out.name == "cuMemcpyDtoH_v2_ptds");
    REQUIRE(copy_out.outputs.size() == 1);
    CHECK(copy_out.outputs[0].bytes == 16);
    digests.insert({copy_out.outputs[0].digest.lo, copy_out.outputs[0].digest.hi});
    // Inputs are the same every run: only the racing kernel differs.
    CHECK(ops.front().name == "cuMemcpyHtoD_v2_ptds");
  }
  CHECK(digests.size() >= 2);
  std::remove(trace.c_str());
}

// Records racy_sum into `a` and `b` (with `options`) and diffs them. The race makes two runs
// differ with overwhelming probability; up to 5 tries until they do.
RunResult DiffTwoRacyRecordings(const std::string& a, const std::string& b,
                                const std::string& options = "") {
  RunResult diff;
  for (int run = 0; run < 5 && diff.status != 1; ++run) {
    REQUIRE(RecordRun(a, PROG_RACY_SUM, options).status == 0);
    REQUIRE(RecordRun(b, PROG_RACY_SUM, options).status == 0);
    diff = Run(std::string("'" NDTRACE_BIN "' diff '") + a + "' '" + b + "'");
  }
  return diff;
}

TEST_CASE("ndtrace diff of two racy_sum recordings names the racing kernel as the suspect",
          "[tracer]") {
  const std::string a = TempPath("racy_a.ndt"), b = TempPath("racy_b.ndt");
  const RunResult diff = DiffTwoRacyRecordings(a, b);
  INFO(diff.out << diff.err);
  CHECK(diff.status == 1);
  CHECK_THAT(diff.out, Catch::Contains("error[propagated]") &&
                           Catch::Contains("suspect: op 2, kernel_launch: RacySum("));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("ndtrace diff of two vector_add recordings finds them identical", "[tracer]") {
  const std::string a = TempPath("vector_a.ndt"), b = TempPath("vector_b.ndt");
  REQUIRE(RecordRun(a, PROG_VECTOR_ADD).status == 0);
  REQUIRE(RecordRun(b, PROG_VECTOR_ADD).status == 0);
  const RunResult diff = Run(std::string("'" NDTRACE_BIN "' diff '") + a + "' '" + b + "'");
  INFO(diff.out << diff.err);
  CHECK(diff.status == 0);
  CHECK_THAT(diff.out, Catch::StartsWith("identical: "));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("ndtrace check finds vector_add deterministic and says the device is simulated",
          "[tracer]") {
  const std::string dir = TempPath("check_vector_add");
  const RunResult check =
      Run(std::string("'" NDTRACE_BIN "' check -n 2 -o '") + dir + "' -- '" PROG_VECTOR_ADD "'");
  INFO(check.out << check.err);
  CHECK(check.status == 0);
  CHECK_THAT(check.out, Catch::Contains("simulated device (no GPU found)"));
  CHECK_THAT(check.out, Catch::Contains("ndtrace check: deterministic: 2 runs gave "
                                        "bitwise-identical results (28 ops each)"));
  CHECK_THAT(check.err, Catch::Contains("run 2: exit status 0, 28 ops recorded"));
  CHECK(std::filesystem::exists(dir + "/run-1.ndt"));
  CHECK(std::filesystem::exists(dir + "/run-2.log"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ndtrace check finds racy_sum nondeterministic and names the racing kernel",
          "[tracer]") {
  const std::string dir = TempPath("check_racy_sum");
  const RunResult check =
      Run(std::string("'" NDTRACE_BIN "' check -n 4 -o '") + dir + "' -- '" PROG_RACY_SUM "'");
  INFO(check.out << check.err);
  CHECK(check.status == 1);
  // The first report is the copy that brought the sums back (propagated, suspect RacySum);
  // check narrows it down: replayed alone, the suspect varies.
  CHECK_THAT(check.out, Catch::Contains("error[nondeterministic_op]: op 2 is nondeterministic"));
  CHECK_THAT(check.out, Catch::Contains("ndtrace check: NOT deterministic:") &&
                            Catch::Contains("op 2 (nondeterministic_op; RacySum("));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ndtrace check refuses a bad run count or a missing --", "[tracer]") {
  CHECK(Run(std::string("'" NDTRACE_BIN "' check -n 1 -- '" PROG_VECTOR_ADD "'")).status == 2);
  const RunResult no_separator = Run(std::string("'" NDTRACE_BIN "' check '" PROG_VECTOR_ADD "'"));
  CHECK(no_separator.status == 2);
  CHECK_THAT(no_separator.err, Catch::Contains("error: check: put `--`"));
  const RunResult negative = Run(std::string("'" NDTRACE_BIN "' check --progress-every -1 -- '")
                                 + PROG_VECTOR_ADD + "'");
  CHECK(negative.status == 2);
  CHECK_THAT(negative.err,
             Catch::Contains("error: --progress-every: must be a whole number, 0..86400"));
}

TEST_CASE("ndtrace check says while a run goes on how many ops it has recorded so far",
          "[tracer]") {
  // A shell that waits, runs vector_add (a child process: its trace is a companion of the
  // run's), then waits again: the progress lines come before, between and after.
  const std::string dir = TempPath("check_progress");
  const RunResult check = Run(std::string("'" NDTRACE_BIN "' check -n 2 --progress-every 1 -o '") +
                              dir + "' -- sh -c \"sleep 1.5; '" PROG_VECTOR_ADD "' && sleep 1.5\"");
  INFO(check.out << check.err);
  CHECK(check.status == 0);
  CHECK_THAT(check.err, Catch::Contains("run 1: running for 1 s, no CUDA call yet") &&
                            Catch::Contains("run 2: running for 1 s, no CUDA call yet") &&
                            Catch::Contains("s, 28 ops recorded so far\n") &&
                            Catch::Contains("run 2: exit status 0, 28 ops recorded"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("driver_only, which reaches the driver only through cuGetProcAddress_v2, is traced",
          "[tracer]") {
  const RunResult plain = Run("'" PROG_DRIVER_ONLY "'");
  const std::string trace = TempPath("driver_only.ndt");
  const RunResult traced = RecordRun(trace, PROG_DRIVER_ONLY);
  CHECK(traced.status == plain.status);
  CHECK(traced.out == plain.out);
  const std::vector<Record> records = ReadAll(trace);
  const std::vector<OpRecord> ops = Ops(records);
  std::vector<std::string> names;
  for (const OpRecord& op : ops) names.push_back(op.name);
  CHECK(names ==
        std::vector<std::string>{"cuMemcpyHtoD_v2",
                                 "ScaleOffset(unsigned int*, unsigned int, unsigned int, int)",
                                 "cuCtxSynchronize_v2", "cuMemcpyDtoH_v2"});
  REQUIRE(ops.size() == 4);
  CHECK((ops[1].module_id >> 63) == 1);
  CHECK(PointerArg(ops[1], "arg0").allocation_id == 1);
  CHECK(ops[3].outputs.size() == 1);
  bool module_seen = false;
  for (const Record& record : records) {
    if (const auto* module = std::get_if<ndt::format::ModuleLoadRecord>(&record)) {
      module_seen = true;
      CHECK(module->api == "cuModuleLoadData");
      CHECK(module->image_bytes > 0);
      CHECK(module->module_id == ops[1].module_id);
    }
  }
  CHECK(module_seen);
  std::remove(trace.c_str());
}

TEST_CASE("an unwritable trace path leaves the program's output and status unchanged", "[tracer]") {
  const RunResult plain = Run("'" PROG_VECTOR_ADD "'");
  const RunResult traced = RecordRun("/nonexistent/x.ndt", PROG_VECTOR_ADD);
  CHECK(traced.status == plain.status);
  CHECK(traced.out == plain.out);
  const std::vector<std::string> lines = NdtraceLines(traced.err);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("/nonexistent/x.ndt") != std::string::npos);
  CHECK(lines[0].find("No such file or directory") != std::string::npos);
}

TEST_CASE("ndtrace record passes the exit status through and writes no trace without CUDA",
          "[tracer]") {
  const std::string trace = TempPath("no_cuda.ndt");
  std::remove(trace.c_str());
  const RunResult result =
      Run(std::string("'" NDTRACE_BIN "' record -o '") + trace + "' -- sh -c 'exit 7'");
  CHECK(result.status == 7);
  CHECK(access(trace.c_str(), F_OK) != 0);
  CHECK(NdtraceLines(result.err).size() == 1);
  CHECK(result.err.find("made no CUDA call") != std::string::npos);
}

TEST_CASE("ndtrace record without -- before the command is a usage error", "[tracer]") {
  const RunResult missing_separator = Run("'" NDTRACE_BIN "' record -o x.ndt true");
  CHECK(missing_separator.status == 2);
  CHECK(missing_separator.err.find("error: ") != std::string::npos);
  const RunResult missing_command = Run("'" NDTRACE_BIN "' record -o x.ndt --");
  CHECK(missing_command.status == 2);
}

TEST_CASE("libndtrace.so exports only its hooks", "[tracer]") {
  const RunResult nm = Run("nm -D --defined-only '" NDT_TRACER_LIB "'");
  REQUIRE(nm.status == 0);
  std::set<std::string> names;
  for (const std::string& line : Lines(nm.out)) {
    const std::string name = line.substr(line.rfind(' ') + 1);
    names.insert(name);
    INFO("exported: " << name);
    // The dl, exit, exec, thread-creation and signal-disposition functions, the driver (cu*)
    // and the libraries (cudnn*, cublas*, curand*: "cu" too; nccl*), the NVTX injection's entry
    // point and the range, tensor and CUPTI step-aside functions of the Python shim.
    CHECK((name == "dlsym" || name == "dlvsym" || name == "_exit" || name == "_Exit" ||
           name == "pthread_create" || name == "sigaction" || name == "signal" ||
           name.rfind("exec", 0) == 0 || name.rfind("cu", 0) == 0 || name.rfind("nccl", 0) == 0 ||
           name == "InitializeInjectionNvtx2" || name == "ndtrace_range_push" ||
           name == "ndtrace_range_pop" || name == "ndtrace_tensor_op_begin" ||
           name == "ndtrace_tensor_op_end" || name == "ndtrace_cupti_yield"));
  }
  for (const char* hook :
       {"dlsym", "dlvsym", "cuGetProcAddress", "cuGetProcAddress_v2", "cuLaunchKernel",
        "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuMemAlloc_v2", "cuMemcpyHtoD_v2",
        "cuLibraryLoadData", "pthread_create", "InitializeInjectionNvtx2", "sigaction", "signal"}) {
    CHECK(names.count(hook) == 1);
  }
  // Unversioned: a version script with a node name would version every hook.
  const RunResult versions = Run("readelf -V '" NDT_TRACER_LIB "'");
  CHECK(versions.out.find("Version definition") == std::string::npos);
}

TEST_CASE("libndtrace.so needs no shared library but libc and Cap'n Proto's", "[tracer]") {
  const RunResult dynamic = Run("readelf -d '" NDT_TRACER_LIB "'");
  REQUIRE(dynamic.status == 0);
  std::set<std::string> needed;
  for (const std::string& line : Lines(dynamic.out)) {
    const size_t open = line.find("(NEEDED)") == std::string::npos ? line.npos : line.find('[');
    const size_t close = line.find(']', open);
    if (close != std::string::npos) needed.insert(line.substr(open + 1, close - open - 1));
  }
  // The C++ runtime, zstd and xxHash are linked in and hidden; Debian's Cap'n Proto archives
  // cannot go into a shared object (CMakeLists.txt), so its two libraries stay.
  const std::set<std::string> expected = {"libc.so.6", "ld-linux-x86-64.so.2",
                                          "libcapnp-0.9.2.so", "libkj-0.9.2.so"};
  CHECK(needed == expected);
}

TEST_CASE("libndtrace.so loads by dlopen without the preload, as an NVTX injection alone can",
          "[tracer]") {
  // One initial-exec thread-local (DF_STATIC_TLS) puts the library's whole TLS block in static
  // TLS, and a dlopen then fails where glibc's surplus is smaller than it (tracer/README.md,
  // "How records reach the file").
  const RunResult dynamic = Run("readelf -d '" NDT_TRACER_LIB "'");
  REQUIRE(dynamic.status == 0);
  CHECK(dynamic.out.find("STATIC_TLS") == std::string::npos);
  const RunResult load = Run("python3 -c \"import ctypes; ctypes.CDLL('" NDT_TRACER_LIB "')\"");
  INFO(load.err);
  CHECK(load.status == 0);
}

// ---- digests of device memory ------------------------------------------------------------

TEST_CASE("the exit state digest covers every live allocation and is the same in two recordings",
          "[tracer]") {
  const std::string first = TempPath("exit_1.ndt"), second = TempPath("exit_2.ndt");
  REQUIRE(RecordRun(first, PROG_VECTOR_ADD).status == 0);
  REQUIRE(RecordRun(second, PROG_VECTOR_ADD).status == 0);
  const std::vector<Record> a = ReadAll(first), b = ReadAll(second);
  const std::vector<StateDigestRecord> states_a = StateDigests(a), states_b = StateDigests(b);
  REQUIRE(states_a.size() == 1);
  REQUIRE(states_b.size() == 1);
  CHECK(states_a[0].reason == "exit");
  CHECK(states_a[0].after_op == Ops(a).back().sequence);
  CHECK(CheckStateDigestsCoverLiveAllocations(a) == 1);
  CHECK(Masked(states_a[0]) == Masked(states_b[0]));
  // The exit digest is the last record but for the GPU times of earlier work, which CUPTI
  // delivers when the trace closes, and the note that counts them: no op is recorded after it.
  size_t last = a.size() - 1;
  while (last > 0 && (std::holds_alternative<ndt::format::GpuActivityRecord>(a[last]) ||
                      std::holds_alternative<ndt::format::TracerNote>(a[last]))) {
    --last;
  }
  CHECK(std::holds_alternative<StateDigestRecord>(a[last]));

  // --no-exit-digest (NDTRACE_DIGEST_EXIT=0) turns it off.
  REQUIRE(RecordRun(first, PROG_VECTOR_ADD, "--no-exit-digest").status == 0);
  CHECK(StateDigests(ReadAll(first)).empty());
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST_CASE("with --digest-every 1 a state digest of all live memory follows every op",
          "[tracer]") {
  const std::string first = TempPath("every_1.ndt"), second = TempPath("every_2.ndt");
  const RunResult plain = Run("'" PROG_VECTOR_ADD "'");
  const RunResult traced = RecordRun(first, PROG_VECTOR_ADD, "--digest-every 1");
  REQUIRE(traced.status == 0);
  CHECK(traced.out == plain.out);
  REQUIRE(RecordRun(second, PROG_VECTOR_ADD, "--digest-every 1").status == 0);
  const std::vector<Record> records = ReadAll(first);
  const std::vector<OpRecord> ops = Ops(records);
  REQUIRE(ops.size() == 28);
  std::vector<uint64_t> after;
  size_t exits = 0;
  for (const StateDigestRecord& state : StateDigests(records)) {
    if (state.reason == "exit") {
      ++exits;
    } else {
      CHECK(state.reason == "every 1 ops");
      after.push_back(state.after_op);
    }
  }
  CHECK(exits == 1);
  REQUIRE(after.size() == ops.size());
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i] == i);
  CHECK(CheckStateDigestsCoverLiveAllocations(records) == ops.size() + 1);
  // Three 256 KiB allocations are live from op 0 to the last op.
  CHECK(StateDigests(records).at(0).allocations.size() == 3);

  const std::vector<StateDigestRecord> a = StateDigests(records);
  const std::vector<StateDigestRecord> b = StateDigests(ReadAll(second));
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(Masked(a[i]) == Masked(b[i]));
  const RunResult diff =
      Run(std::string("'" NDTRACE_BIN "' diff '") + first + "' '" + second + "'");
  INFO(diff.out << diff.err);
  CHECK(diff.status == 0);
  CHECK_THAT(diff.out, Catch::StartsWith("identical: "));

  // Every 5 ops: after ops 4, 9, ..., 24 (and at exit).
  REQUIRE(RecordRun(first, PROG_VECTOR_ADD, "--digest-every 5 --no-exit-digest").status == 0);
  after.clear();
  for (const StateDigestRecord& state : StateDigests(ReadAll(first))) {
    CHECK(state.reason == "every 5 ops");
    after.push_back(state.after_op);
  }
  CHECK(after == std::vector<uint64_t>{4, 9, 14, 19, 24});
  std::remove(first.c_str());
  std::remove(second.c_str());
}

TEST_CASE("with --digest-sync a state digest follows every host synchronisation", "[tracer]") {
  const std::string trace = TempPath("sync.ndt");
  REQUIRE(RecordRun(trace, PROG_VECTOR_ADD, "--digest-sync --no-exit-digest").status == 0);
  const std::vector<Record> records = ReadAll(trace);
  std::vector<uint64_t> after;
  for (const StateDigestRecord& state : StateDigests(records)) {
    CHECK(state.reason == "synchronize");
    after.push_back(state.after_op);
  }
  // cuStreamSynchronize twice, then cuCtxSynchronize (ops 9, 10, 11).
  CHECK(after == std::vector<uint64_t>{19, 23, 27});
  CHECK(CheckStateDigestsCoverLiveAllocations(records) == 3);
  std::remove(trace.c_str());
}

TEST_CASE("with --digest-window each op in the window digests what it references", "[tracer]") {
  const std::string trace = TempPath("window.ndt");
  REQUIRE(RecordRun(trace, PROG_VECTOR_ADD, "--digest-window 10:16").status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  REQUIRE(ops.size() == 28);
  for (uint64_t sequence : {10, 16}) {
    const OpRecord& launch = ops[sequence];
    INFO("op " << sequence << " " << launch.name);
    REQUIRE(launch.kind == OpKind::kKernelLaunch);
    REQUIRE(launch.inputs.size() == 3);
    REQUIRE(launch.outputs.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(launch.inputs[i].role == "arg" + std::to_string(i));
      CHECK(launch.inputs[i].pointer.allocation_id == i + 1);
      CHECK(launch.inputs[i].pointer.offset == 0);
      CHECK(launch.inputs[i].bytes == 262144);
      CHECK(launch.outputs[i].role == launch.inputs[i].role);
      CHECK(launch.outputs[i].pointer == launch.inputs[i].pointer);
    }
    // The inputs a and b are only read; c (arg2) is written.
    CHECK(launch.outputs[0].digest == launch.inputs[0].digest);
    CHECK(launch.outputs[1].digest == launch.inputs[1].digest);
    CHECK(!(launch.outputs[2].digest == launch.inputs[2].digest));
  }
  // Ops outside the window (the first launch's memset, op 0) get no such digests.
  CHECK(ops[0].outputs.empty());
  std::remove(trace.c_str());

  // The memset (op 0) in the window: its destination allocation, whole.
  REQUIRE(RecordRun(trace, PROG_VECTOR_ADD, "--digest-window 0:0").status == 0);
  const std::vector<OpRecord> memset_ops = Ops(ReadAll(trace));
  REQUIRE(memset_ops.at(0).kind == OpKind::kMemset);
  REQUIRE(memset_ops[0].outputs.size() == 1);
  CHECK(memset_ops[0].outputs[0].role == "dst");
  CHECK(memset_ops[0].outputs[0].bytes == 262144);
  CHECK(memset_ops.at(10).inputs.empty());
  std::remove(trace.c_str());
}

TEST_CASE("with --digest-window 0: diff names racy_sum's kernel as the nondeterministic op",
          "[tracer]") {
  const std::string a = TempPath("racy_window_a.ndt"), b = TempPath("racy_window_b.ndt");
  const RunResult diff = DiffTwoRacyRecordings(a, b, "--digest-window 0:");
  INFO(diff.out << diff.err);
  CHECK(diff.status == 1);
  CHECK_THAT(diff.out, Catch::Contains("error[nondeterministic_op]: op 2 is nondeterministic") &&
                           Catch::Contains("kernel_launch\n      RacySum(") &&
                           Catch::Contains("different results from identical inputs"));
  CHECK_THAT(diff.out, !Catch::Contains("suspect:"));

  // Its inputs, the 4 MiB of values and the sums before the launch, are equal in both runs;
  // its outputs (the sums after it) differ.
  const std::vector<OpRecord> ops_a = Ops(ReadAll(a)), ops_b = Ops(ReadAll(b));
  REQUIRE(ops_a.size() > 2);
  REQUIRE(ops_b.size() > 2);
  const OpRecord& x = ops_a[2];
  const OpRecord& y = ops_b[2];
  CHECK_THAT(x.name, Catch::StartsWith("RacySum("));
  REQUIRE(x.inputs.size() == 2);
  REQUIRE(y.inputs.size() == 2);
  CHECK(x.inputs[0].bytes == 4 << 20);
  CHECK(x.inputs[1].bytes == 16);
  CHECK(x.inputs[0].digest == y.inputs[0].digest);
  CHECK(x.inputs[1].digest == y.inputs[1].digest);
  REQUIRE(x.outputs.size() == 2);
  REQUIRE(y.outputs.size() == 2);
  CHECK(x.outputs[0].digest == y.outputs[0].digest);
  CHECK(!(x.outputs[1].digest == y.outputs[1].digest));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("with racy_sum's kernel captured: diff gives the exact size of its divergence",
          "[tracer]") {
  const std::string a = TempPath("racy_capture_a.ndt"), b = TempPath("racy_capture_b.ndt");
  const RunResult diff = DiffTwoRacyRecordings(a, b, "--capture 'kernel:RacySum*'");
  INFO(diff.out << diff.err);
  CHECK(diff.status == 1);
  // The captured allocations are data: the sums after the launch (alloc2) differ, the values
  // and the sums before it are equal, and nothing is reported as a different argument.
  CHECK_THAT(diff.out, Catch::Contains("error[nondeterministic_op]: op 2 is nondeterministic") &&
                           Catch::Contains("different results from identical inputs") &&
                           Catch::Contains("captured output `alloc2`") &&
                           Catch::Contains("0 structural differences"));
  // RacySum(float const*, float*, int, int): alloc2 is parameter 1, so its 16 bytes are 4 f32
  // sums, compared one by one.
  CHECK_THAT(diff.out, Catch::Matches("(.|\\n)*exact \\(captured `alloc2`, f32\\): [1-4] of 4 "
                                      "elements differ(.|\\n)*largest \\|A-B\\| [0-9.e+-]+ at "
                                      "\\[[0-3]\\](.|\\n)*"));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("ndtrace record and check refuse a bad --digest-window", "[tracer]") {
  for (const char* window : {"5", "3:2", "a:b", ":4", "1:2:3", "-1:", "1:x"}) {
    INFO("--digest-window " << window);
    const RunResult record = Run(std::string("'" NDTRACE_BIN "' record --digest-window '") +
                                 window + "' -o /dev/null -- '" PROG_VECTOR_ADD "'");
    CHECK(record.status == 2);
    CHECK_THAT(record.err, Catch::Contains("error: record: --digest-window must be A:B or A:"));
    const RunResult check = Run(std::string("'" NDTRACE_BIN "' check --digest-window '") + window +
                                "' -o /dev/null -- '" PROG_VECTOR_ADD "'");
    CHECK(check.status == 2);
    CHECK_THAT(check.err, Catch::Contains("error: check: --digest-window must be A:B or A:"));
  }
}

TEST_CASE("ndtrace check passes the digest options on to every run", "[tracer]") {
  const std::string dir = TempPath("check_digests");
  const RunResult check = Run(std::string("'" NDTRACE_BIN "' check --digest-every 4 "
                                          "--digest-window 10:10 -o '") +
                              dir + "' -- '" PROG_VECTOR_ADD "'");
  INFO(check.out << check.err);
  CHECK(check.status == 0);
  for (const char* run : {"/run-1.ndt", "/run-2.ndt"}) {
    const std::vector<Record> records = ReadAll(dir + run);
    CHECK(StateDigests(records).size() == 8);  // after ops 3, 7, ..., 27, and at exit
    CHECK(Ops(records).at(10).outputs.size() == 3);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("check reports a structural difference: a run that launched one kernel more",
          "[tracer]") {
  ndt::testing::TempDir dir;
  // Each run reads how many iterations to do from a file and leaves one more for the next.
  const std::string counter = (dir / "iterations").string();
  const std::string program = "sh -c \"n=\\$(cat '" + counter + "' 2>/dev/null || echo 8); echo "
                              "\\$((n + 1)) > '" + counter + "'; exec '" PROG_WORKERS
                              "' --iterations \\$n\"";
  const RunResult run = Run(std::string("'" NDTRACE_BIN "' check -o '") +
                            (dir / "runs").string() + "' -- " + program);
  CHECK(run.status == 1);
  CHECK(run.out.find("differ in structure") != std::string::npos);
  CHECK(run.out.find("only in run B") != std::string::npos);
  CHECK(run.out.find("Step(float*, int, float)") != std::string::npos);
}

TEST_CASE("check keeps each run's output in its log and the traces whole", "[tracer]") {
  ndt::testing::TempDir dir;
  const RunResult run = Run(std::string("'" NDTRACE_BIN "' check -o '") + dir.path().string() +
                            "' -- '" PROG_VECTOR_ADD "'");
  CHECK(run.status == 0);
  CHECK(run.err.find("warning:") == std::string::npos);
  CHECK(run.out.find("warning:") == std::string::npos);
  for (const char* log : {"run-1.log", "run-2.log"}) {
    INFO(log);
    CHECK(Slurp((dir / log).string()).find("checksum 664dc617a67a437d\n") != std::string::npos);
  }
  auto reader = ndt::format::TraceReader::Open((dir / "run-1.ndt").string());
  REQUIRE(reader.ok());
  Record record;
  while ((*reader)->Next(&record)) {
  }
  CHECK((*reader)->complete());
  CHECK((*reader)->damage().empty());
}

TEST_CASE("an asynchronous 2D copy into padded host rows is digested, rows only, at the sync",
          "[tracer]") {
  // tests/corpus/host_callbacks uploads each batch from padded pinned rows (the padding holds
  // bytes that differ from run to run) and, at the end, downloads the last one back into padded
  // rows with cudaMemcpy2DAsync, then synchronises the copy stream. The download's host rows
  // are digested there, back to back: the same digest as the upload of those rows had.
  const std::string trace = TempPath("host_callbacks.ndt");
  const RunResult traced = RecordRun(trace, CORPUS_HOST_CALLBACKS);
  INFO(traced.err);
  REQUIRE(traced.status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  const auto unsigned_arg = [](const OpRecord& op, const std::string& name) -> uint64_t {
    for (const Argument& argument : op.args) {
      if (argument.name == name) return std::get<uint64_t>(argument.value);
    }
    FAIL("no argument " << name << " in op " << op.sequence);
    return 0;
  };
  const OpRecord* upload = nullptr;
  const OpRecord* download = nullptr;
  for (const OpRecord& op : ops) {
    if (op.name != "cuMemcpy2DAsync_v2") continue;
    // The upload packs rows on the device; the download pads them on the host.
    const bool padded = unsigned_arg(op, "dstPitch") > unsigned_arg(op, "width");
    (padded ? download : upload) = &op;
  }
  REQUIRE(upload != nullptr);
  REQUIRE(download != nullptr);
  CHECK(unsigned_arg(*download, "height") == 96);
  // The last upload filled the buffer the download reads (two buffers, 12 steps).
  CHECK(PointerArg(*download, "src").allocation_id == PointerArg(*upload, "dst").allocation_id);
  REQUIRE(upload->inputs.size() == 1);
  const std::string role = "dst of op " + std::to_string(download->sequence);
  const ndt::format::BufferDigest* downloaded = nullptr;
  for (const OpRecord& op : ops) {
    for (const auto& digest : op.outputs) {
      if (digest.role == role) downloaded = &digest;
    }
  }
  REQUIRE(downloaded != nullptr);
  CHECK(downloaded->bytes == 96 * 64 * 4);
  CHECK(downloaded->digest == upload->inputs[0].digest);
  std::remove(trace.c_str());
}
