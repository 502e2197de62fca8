// Digests computed by the digest kernels on the op's own stream into the mapped pinned ring
// (tracer/gpu_digests.h), against the CPU path (NDTRACE_DIGEST_DEVICE=cpu), on the stand-in
// device: the stand-in runs a host version of the digest kernel in stream order, so this checks the
// launches, the ring, the held-back records and their order, not GPU code. The stand-in's call
// log (NDT_STANDIN_LOG) shows which driver calls each path made.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::BufferDigest;
using ndt::format::OpKind;
using ndt::format::StateDigestRecord;

// Records `program ARGS` with `options`, NDTRACE_DIGEST_DEVICE=`device` and the stand-in's call
// log in `log`; `env` is put before the command as is.
RunResult RecordWith(const std::string& device, const std::string& trace, const std::string& log,
                     const std::string& program, const std::string& options,
                     const std::string& env = "") {
  std::remove(trace.c_str());
  std::remove(log.c_str());
  return Run("NDTRACE_DIGEST_DEVICE=" + device + " NDT_STANDIN_LOG='" + log + "' " + env + " '" +
             NDTRACE_BIN + "' record " + options + " -o '" + trace + "' -- " + program);
}

// What must be equal between the two paths: everything but the raw address and the numeric
// summary (compared on its own: Summaries).
using DigestKey = std::tuple<std::string, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t>;

std::vector<DigestKey> Keys(const std::vector<BufferDigest>& digests) {
  std::vector<DigestKey> keys;
  for (const BufferDigest& d : digests) {
    keys.emplace_back(d.role, d.pointer.allocation_id, d.pointer.offset, d.bytes, d.digest.lo,
                      d.digest.hi);
  }
  return keys;
}

// The numeric summaries of f32 library extents: the CPU path copies the values; the GPU path
// stages them with an asynchronous copy before the digest kernels.
using SummaryKey = std::tuple<uint64_t, double, double, double, uint64_t, uint64_t>;

std::vector<SummaryKey> Summaries(const std::vector<BufferDigest>& digests) {
  std::vector<SummaryKey> keys;
  for (const BufferDigest& d : digests) {
    keys.emplace_back(d.summary.count, d.summary.min, d.summary.max, d.summary.sum,
                      d.summary.nan_count, d.summary.inf_count);
  }
  return keys;
}

// Every op's inputs and outputs, op by op.
std::vector<std::pair<std::vector<DigestKey>, std::vector<DigestKey>>> OpDigests(
    const std::vector<OpRecord>& ops) {
  std::vector<std::pair<std::vector<DigestKey>, std::vector<DigestKey>>> all;
  for (const OpRecord& op : ops) all.emplace_back(Keys(op.inputs), Keys(op.outputs));
  return all;
}

std::vector<std::vector<DigestKey>> StateDigests(const std::vector<Record>& records) {
  std::vector<std::vector<DigestKey>> states;
  for (const Record& record : records) {
    if (const auto* state = std::get_if<StateDigestRecord>(&record)) {
      states.push_back(Keys(state->allocations));
    }
  }
  return states;
}

// The record types in file order, ops by sequence: the held-back records must not reorder them.
// GPU activity records are left out: the GPU path's own digest kernels are GPU work too, and
// CUPTI delivers activities when its buffers fill.
std::vector<std::string> Shape(const std::vector<Record>& records) {
  std::vector<std::string> shape;
  for (const Record& record : records) {
    if (std::holds_alternative<ndt::format::GpuActivityRecord>(record)) continue;
    std::string line = ndt::format::RecordTypeName(record);
    if (const auto* op = std::get_if<OpRecord>(&record)) line += " " + std::to_string(op->sequence);
    shape.push_back(line);
  }
  return shape;
}

// How many lines of the stand-in's call log name a served call starting with one of `names`.
size_t Calls(const std::string& log, std::initializer_list<std::string> names) {
  size_t count = 0;
  for (const std::string& line : Lines(Slurp(log))) {
    for (const std::string& name : names) {
      if (line.rfind(name, 0) == 0 && line.find(' ') == std::string::npos) ++count;
    }
  }
  return count;
}

size_t Synchronisations(const std::string& log) {
  return Calls(log,
               {"cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH"});
}

size_t DigestCount(const std::vector<OpRecord>& ops) {
  size_t count = 0;
  for (const OpRecord& op : ops) count += op.inputs.size() + op.outputs.size();
  return count;
}

}  // namespace

TEST_CASE("window and state digests on the GPU equal the CPU path's, op by op", "[gpu_digest]") {
  ndt::testing::TempDir dir;
  const std::string gpu = (dir / "gpu.ndt").string(), cpu = (dir / "cpu.ndt").string();
  const std::string gpu_log = (dir / "gpu.log").string(), cpu_log = (dir / "cpu.log").string();
  const std::string program = "'" PROG_MANY_OPS "' 300 -1";
  const std::string options = "--digest-window 0: --digest-every 7";
  const RunResult on_gpu = RecordWith("gpu", gpu, gpu_log, program, options);
  const RunResult on_cpu = RecordWith("cpu", cpu, cpu_log, program, options);
  INFO(on_gpu.err << on_cpu.err);
  REQUIRE(on_gpu.status == 0);
  REQUIRE(on_cpu.status == 0);
  CHECK(on_gpu.out == on_cpu.out);
  CHECK(NdtraceLines(on_gpu.err).size() == 1);  // "trace written": no fallback said

  const std::vector<Record> gpu_records = ReadAll(gpu), cpu_records = ReadAll(cpu);
  const std::vector<OpRecord> gpu_ops = Ops(gpu_records), cpu_ops = Ops(cpu_records);
  REQUIRE(gpu_ops.size() == cpu_ops.size());
  CHECK(Shape(gpu_records) == Shape(cpu_records));
  CHECK(OpDigests(gpu_ops) == OpDigests(cpu_ops));
  CHECK(StateDigests(gpu_records) == StateDigests(cpu_records));

  // Not trivially equal: every launch has its state before and after, and they differ (but for
  // the first, which maps the zeroed state to itself).
  size_t launches = 0, changed = 0;
  for (const OpRecord& op : gpu_ops) {
    if (op.kind != OpKind::kKernelLaunch) continue;
    ++launches;
    REQUIRE(op.inputs.size() == 1);
    REQUIRE(op.outputs.size() == 1);
    CHECK(op.inputs[0].bytes == 64 * 4);
    if (!(op.inputs[0].digest == op.outputs[0].digest)) ++changed;
  }
  CHECK(launches == 300);
  CHECK(changed == 299);
  CHECK(StateDigests(gpu_records).size() >= 300 / 7);

  // The GPU path launched the digest kernel once for each digest of device memory (the
  // program's own launches are the same in both runs; the copies' digests are of host memory),
  // and one that zeroes the scratch once, and put its ring in mapped pinned memory.
  size_t device_digests = 0;
  for (const OpRecord& op : gpu_ops) {
    if (op.kind != OpKind::kMemcpy) device_digests += op.inputs.size() + op.outputs.size();
  }
  for (const auto& state : StateDigests(gpu_records)) device_digests += state.size();
  CHECK(Calls(gpu_log, {"cuLaunchKernel"}) ==
        Calls(cpu_log, {"cuLaunchKernel"}) + device_digests + 1);
  CHECK(Calls(gpu_log, {"cuMemsetD8_v2"}) == Calls(cpu_log, {"cuMemsetD8_v2"}));
  CHECK(Calls(gpu_log, {"cuMemHostAlloc"}) == 1);
  CHECK(Calls(cpu_log, {"cuMemHostAlloc"}) == 0);
}

TEST_CASE("per-op digests on the GPU take no host synchronisation", "[gpu_digest]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "t.ndt").string();
  const std::string plain_log = (dir / "plain.log").string();
  const std::string gpu_log = (dir / "gpu.log").string(), cpu_log = (dir / "cpu.log").string();
  const std::string program = "'" PROG_MANY_OPS "' 400 -1";
  REQUIRE(RecordWith("gpu", trace, plain_log, program, "").status == 0);
  REQUIRE(RecordWith("gpu", trace, gpu_log, program, "--digest-window 0:").status == 0);
  CHECK(DigestCount(Ops(ReadAll(trace))) >= 800);
  REQUIRE(RecordWith("cpu", trace, cpu_log, program, "--digest-window 0:").status == 0);
  const size_t plain = Synchronisations(plain_log);
  const size_t on_gpu = Synchronisations(gpu_log);
  const size_t on_cpu = Synchronisations(cpu_log);
  INFO("synchronisations and device-to-host copies: " << plain << " without digests, " << on_gpu
                                                      << " GPU path, " << on_cpu << " CPU path");
  // One synchronisation when the ring is set up (the sums are zeroed once per context).
  CHECK(on_gpu <= plain + 1);
  // The CPU path synchronises and copies for every digest: the count above can tell.
  CHECK(on_cpu >= plain + 800);
}

TEST_CASE("library digests on the GPU equal the CPU path's", "[gpu_digest]") {
  ndt::testing::TempDir dir;
  for (const char* program : {PROG_GEMM, PROG_CONV_LEGACY}) {
    INFO(program);
    const std::string gpu = (dir / "gpu.ndt").string(), cpu = (dir / "cpu.ndt").string();
    const std::string log = (dir / "log").string();
    // --deterministic: conv_legacy's default backward-filter algorithm races.
    const std::string command = std::string("'") + program + "'";
    REQUIRE(RecordWith("gpu", gpu, log, command, "--deterministic").status == 0);
    // The ring only: f32 summaries come from the digest kernel, not from staged bytes.
    CHECK(Calls(log, {"cuMemHostAlloc"}) == 1);
    REQUIRE(RecordWith("cpu", cpu, log, command, "--deterministic").status == 0);
    const std::vector<OpRecord> gpu_ops = Ops(ReadAll(gpu)), cpu_ops = Ops(ReadAll(cpu));
    REQUIRE(gpu_ops.size() == cpu_ops.size());
    size_t library_digests = 0, f32 = 0, summaries = 0;
    for (size_t i = 0; i < gpu_ops.size(); ++i) {
      INFO("op " << i << " " << gpu_ops[i].name);
      CHECK(Keys(gpu_ops[i].inputs) == Keys(cpu_ops[i].inputs));
      CHECK(Keys(gpu_ops[i].outputs) == Keys(cpu_ops[i].outputs));
      CHECK(Summaries(gpu_ops[i].inputs) == Summaries(cpu_ops[i].inputs));
      CHECK(Summaries(gpu_ops[i].outputs) == Summaries(cpu_ops[i].outputs));
      if (gpu_ops[i].kind != OpKind::kMemcpy) {
        library_digests += gpu_ops[i].inputs.size() + gpu_ops[i].outputs.size();
        for (const auto* digests : {&gpu_ops[i].inputs, &gpu_ops[i].outputs}) {
          for (const BufferDigest& d : *digests) {
            f32 += d.dtype == ndt::format::DType::kF32 ? 1 : 0;
            summaries += d.summary.count != 0 ? 1 : 0;
          }
        }
      }
    }
    CHECK(library_digests >= 3);
    CHECK(f32 >= 3);
    CHECK(summaries == f32);
  }
}

TEST_CASE("a ring smaller than the digests in flight still gives every digest", "[gpu_digest]") {
  ndt::testing::TempDir dir;
  const std::string gpu = (dir / "gpu.ndt").string(), cpu = (dir / "cpu.ndt").string();
  const std::string log = (dir / "log").string();
  const std::string program = "'" PROG_MANY_OPS "' 100 -1";
  REQUIRE(
      RecordWith("gpu", gpu, log, program, "--digest-window 0:", "NDTRACE_DIGEST_RING=1").status ==
      0);
  REQUIRE(RecordWith("cpu", cpu, log, program, "--digest-window 0:").status == 0);
  const std::vector<OpRecord> gpu_ops = Ops(ReadAll(gpu)), cpu_ops = Ops(ReadAll(cpu));
  CHECK(DigestCount(gpu_ops) >= 200);
  CHECK(OpDigests(gpu_ops) == OpDigests(cpu_ops));
}

TEST_CASE("ndtrace check pinpoints racy_sum's kernel with digests on the GPU", "[gpu_digest]") {
  ndt::testing::TempDir dir;
  const std::string log = (dir / "log").string();
  const RunResult check = Run("NDTRACE_DIGEST_DEVICE=gpu NDT_STANDIN_LOG='" + log +
                              "' '" NDTRACE_BIN "' check -n 4 --digest-window 0: -o '" +
                              (dir / "check").string() + "' -- '" PROG_RACY_SUM "'");
  INFO(check.out << check.err);
  CHECK(check.status == 1);
  CHECK_THAT(check.out, Catch::Contains("error[nondeterministic_op]: op 2 is nondeterministic") &&
                            Catch::Contains("RacySum("));
  CHECK(Calls(log, {"cuMemHostAlloc"}) == 2);  // both runs made (check stops at the first that
                                               // differs) digested on the GPU
}

TEST_CASE("an invalid NDTRACE_DIGEST_DEVICE or NDTRACE_DIGEST_RING is said and ignored",
          "[gpu_digest]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "t.ndt").string(), log = (dir / "log").string();
  const RunResult run = RecordWith("fpga", trace, log, "'" PROG_VECTOR_ADD "'",
                                   "--digest-window 0:", "NDTRACE_DIGEST_RING=0");
  INFO(run.err);
  CHECK(run.status == 0);
  CHECK_THAT(run.err, Catch::Contains("ignoring NDTRACE_DIGEST_DEVICE=fpga") &&
                          Catch::Contains("ignoring NDTRACE_DIGEST_RING=0"));
  CHECK(Calls(log, {"cuMemHostAlloc"}) == 1);  // auto: the GPU path
  CHECK(DigestCount(Ops(ReadAll(trace))) > 0);
}

TEST_CASE(
    "with kernels running after their launch returns, held records keep their order and "
    "values",
    "[gpu_digest]") {
  // NDT_STANDIN_DEFER_LAUNCHES=1: a launch runs at the next driver call, so a digest's ticket has
  // not arrived when its op is appended (the record is held), and with a one-slot ring the next
  // digest waits for the slot until the driver runs the launch.
  ndt::testing::TempDir dir;
  for (const std::string ring : {"4096", "1"}) {
    for (const std::string program :
         {"'" PROG_MANY_OPS "' 200 -1", "'" PROG_VECTOR_ADD "'", "'" PROG_STREAMS_GRAPHS "'",
          "'" PROG_GEMM "'", "'" PROG_CONV_LEGACY "'"}) {
      INFO(program << ", ring " << ring);
      const std::string gpu = (dir / "gpu.ndt").string(), cpu = (dir / "cpu.ndt").string();
      const std::string log = (dir / "log").string();
      const std::string options = "--deterministic --digest-window 0: --digest-every 5";
      const RunResult on_gpu =
          RecordWith("gpu", gpu, log, program, options,
                     "NDT_STANDIN_DEFER_LAUNCHES=1 NDTRACE_DIGEST_RING=" + ring);
      REQUIRE(on_gpu.status == 0);
      CHECK(Calls(log, {"cuMemHostAlloc"}) >= 1);
      const RunResult on_cpu = RecordWith("cpu", cpu, log, program, options);
      REQUIRE(on_cpu.status == 0);
      CHECK(on_gpu.out == on_cpu.out);
      const std::vector<Record> gpu_records = ReadAll(gpu), cpu_records = ReadAll(cpu);
      const std::vector<OpRecord> gpu_ops = Ops(gpu_records), cpu_ops = Ops(cpu_records);
      CHECK(Shape(gpu_records) == Shape(cpu_records));
      CHECK(OpDigests(gpu_ops) == OpDigests(cpu_ops));
      for (size_t i = 0; i < gpu_ops.size() && i < cpu_ops.size(); ++i) {
        CHECK(Summaries(gpu_ops[i].outputs) == Summaries(cpu_ops[i].outputs));
      }
      CHECK(StateDigests(gpu_records) == StateDigests(cpu_records));
      CHECK(DigestCount(gpu_ops) >= 6);
    }
  }
}
