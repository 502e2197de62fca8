// ndtrace diff on traces written through the writer: one test per divergence class, the
// structural and header differences, the text report against golden files and the JSON
// against its schema.
#include "replayer/trace_diff.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>
#include <thread>

#include "formats/trace_writer.h"
#include "kernels/digest_v1.h"
#include "replayer/diff_report.h"
#include "support/sample_records.h"
#include "support/temp_dir.h"

namespace ndt::replay {
namespace {

using format::AlgorithmChoice;
using format::Argument;
using format::BufferDigest;
using format::DevicePointer;
using format::DType;
using format::OpKind;
using format::OpRecord;
using format::Record;
using testing::TempDir;

BufferDigest Buffer(const char* role, uint64_t allocation, uint64_t digest, double sum = 0) {
  BufferDigest b;
  b.role = role;
  b.pointer = {allocation, 0, 0x7f0000000000 + (allocation << 20)};
  b.bytes = 4096;
  b.digest = {digest, ~digest};
  b.dtype = DType::kF32;
  if (sum != 0) b.summary = {1024, -1.0, 2.0, sum, 0, 0};
  return b;
}

Argument Pointer(const char* name, uint64_t allocation) {
  return {name, DevicePointer{allocation, 0, 0x7f0000000000 + (allocation << 20)}};
}

// A small training-like program: copy in, an index_add_ kernel, a cuDNN convolution,
// dropout, copy out, and a state digest. `change` edits it to plant a divergence.
std::vector<Record> Program(const std::function<void(std::vector<OpRecord>&)>& change = {}) {
  std::vector<OpRecord> ops(5);
  ops[0].kind = OpKind::kMemcpy;
  ops[0].name = "cuMemcpyHtoDAsync_v2";
  ops[0].args = {Pointer("dstDevice", 1), {"ByteCount", uint64_t{4096}}};
  ops[0].inputs = {Buffer("src", 0, 100)};
  ops[1].kind = OpKind::kKernelLaunch;
  ops[1].name =
      "void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true, "
      "at::native::(anonymous namespace)::ReduceAdd>(...)";
  ops[1].args = {{"grid", Argument::Dims{64, 1, 1}}, Pointer("arg0", 2), Pointer("arg1", 1)};
  ops[2].kind = OpKind::kCudnnBackendExecute;
  ops[2].name = "cudnnBackendExecute";
  ops[2].algorithm = AlgorithmChoice{"cudnn", 3, "engine 3", {{1, 2}}, "",
                                     format::Determinism::kDeterministic,
                                     format::ChoiceSource::kHeuristic};
  ops[2].inputs = {Buffer("x", 2, 200)};
  ops[2].outputs = {Buffer("y", 3, 300, 12.5)};
  ops[3].kind = OpKind::kKernelLaunch;
  ops[3].name = "void at::native::fused_dropout_kernel_vec<float>(..., at::PhiloxCudaState)";
  ops[3].args = {Pointer("arg0", 3), Pointer("arg1", 4)};
  ops[3].rng = format::RngState{"philox", 42, 8, 0, "", false};
  ops[4].kind = OpKind::kMemcpy;
  ops[4].name = "cuMemcpyDtoH_v2";
  ops[4].args = {Pointer("srcDevice", 4), {"ByteCount", uint64_t{4096}}};
  ops[4].outputs = {Buffer("dst", 0, 500)};
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].sequence = i;
    ops[i].stream_id = 1;
    ops[i].start_ns = 1000 * i;
  }
  if (change) change(ops);
  std::vector<Record> records;
  for (auto& op : ops) records.push_back(op);
  records.push_back(format::StateDigestRecord{
      4, "exit", {Buffer("", 3, 300), Buffer("", 4, 400)}, 9000});
  return records;
}

std::string Write(const TempDir& dir, const std::string& name, const std::vector<Record>& records,
                  format::TraceHeader header = testing::SampleHeader()) {
  const std::string path = dir / name;
  auto writer = format::TraceWriter::Create(path, header);
  REQUIRE(writer.ok());
  for (const Record& record : records) (*writer)->Append(record);
  REQUIRE((*writer)->Close().ok());
  return path;
}

DiffReport Diff(const TempDir& dir, const std::vector<Record>& a, const std::vector<Record>& b) {
  auto report = DiffTraces(Write(dir, "a.ndt", a), Write(dir, "b.ndt", b));
  REQUIRE(report.ok());
  return std::move(report).value();
}

TEST_CASE("two identical runs are reported identical", "[replayer]") {
  TempDir dir;
  const DiffReport report = Diff(dir, Program(), Program());
  CHECK(report.identical());
  CHECK(report.ops_compared == 5);
  CHECK_FALSE(report.first_divergence.has_value());
  CHECK_THAT(RenderDiffText(report), Catch::StartsWith("identical: "));
}

TEST_CASE("different outputs from identical inputs name a nondeterministic op", "[replayer]") {
  TempDir dir;
  const DiffReport report = Diff(dir, Program(), Program([](auto& ops) {
    ops[2].outputs[0].digest.lo ^= 1;
    ops[2].outputs[0].summary.sum = 12.500001;
    ops[4].outputs[0].digest.lo ^= 1;  // propagates to the copy out: not the first
  }));
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kNondeterministicOp);
  CHECK(d.op.sequence == 2);
  CHECK(d.op.name == "cudnnBackendExecute");
  REQUIRE(d.size.has_value());
  CHECK(d.size->sum_b == Approx(12.500001));
  REQUIRE(d.hint.has_value());
  CHECK_THAT(d.hint->framework_op, Catch::Contains("Conv"));
  CHECK(report.divergent_ops == 2);
}

TEST_CASE("a racing kernel with output digests is named with the PyTorch op it implements",
          "[replayer]") {
  TempDir dir;
  auto with_output = [](uint64_t digest) {
    return [digest](std::vector<OpRecord>& ops) { ops[1].outputs = {Buffer("arg0", 2, digest)}; };
  };
  const DiffReport report = Diff(dir, Program(with_output(7)), Program(with_output(8)));
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kNondeterministicOp);
  CHECK(report.first_divergence->op.sequence == 1);
  REQUIRE(report.first_divergence->hint.has_value());
  CHECK_THAT(report.first_divergence->hint->framework_op, Catch::Contains("index_add_"));
  CHECK_THAT(report.first_divergence->hint->fix,
             Catch::Contains("torch.use_deterministic_algorithms(True)"));
}

TEST_CASE("a host result differing in its last bit is the op's output, shown apart", "[replayer]") {
  // cublasDdot_v2 in host pointer mode: its result is an argument; two that differ by one ulp
  // must not print alike (std::to_string's six decimals showed 76.266148 for both). It is what
  // the op returned: from identical inputs, a nondeterministic op (it used to be taken for an
  // argument the program passed, a structural difference that hid a race's differing input).
  TempDir dir;
  auto with_result = [](double result) {
    return [result](std::vector<OpRecord>& ops) { ops[2].args.push_back({"result", result}); };
  };
  const double a = 76.26614812345678;
  const DiffReport report =
      Diff(dir, Program(with_result(a)), Program(with_result(std::nextafter(a, 100.0))));
  CHECK_FALSE(report.first_structural.has_value());
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kNondeterministicOp);
  CHECK(report.first_divergence->op.sequence == 2);
  REQUIRE(!report.first_divergence->evidence.empty());
  CHECK_THAT(
      report.first_divergence->evidence[0],
      Catch::Contains("result=76.26614812345677 in run A, result=76.26614812345679 in run B"));
}

// A training step of PyTorch ops on the CPU, as the Python shim records them: a random
// init, a matmul reading a host tensor, a factory of Python values. `seed`, `batch` and `fill`
// set what each of them saw.
std::vector<Record> CpuProgram(uint64_t seed, uint64_t batch, uint64_t fill) {
  const auto host = [](const char* role, uint64_t address, uint64_t digest) {
    BufferDigest b = Buffer(role, 0, digest);
    b.pointer = {0, address, address};
    return b;
  };
  std::vector<OpRecord> ops(3);
  ops[0].name = "aten::uniform_";
  ops[0].outputs = {host("self", 0x1000, seed)};
  ops[1].name = "aten::mm";
  ops[1].inputs = {host("self", 0x2000, batch), host("mat2", 0x1000, seed)};
  ops[1].outputs = {host("out", 0x3000, batch * 31 + seed)};
  ops[2].name = "aten::full";
  ops[2].outputs = {host("out", 0x4000, fill)};
  std::vector<Record> records;
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].kind = OpKind::kFrameworkOp;
    ops[i].sequence = i;
    records.push_back(ops[i]);
  }
  return records;
}

TEST_CASE(
    "PyTorch ops on the CPU: a random op is an RNG-state divergence, data from Python is "
    "propagated from the host",
    "[replayer]") {
  TempDir dir;
  // An unseeded init: the random op drew other numbers from identical (no) inputs.
  DiffReport report = Diff(dir, CpuProgram(1, 5, 9), CpuProgram(2, 5, 9));
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kRngState);
  CHECK(report.first_divergence->op.sequence == 0);
  REQUIRE(report.first_divergence->hint.has_value());
  CHECK_THAT(report.first_divergence->hint->fix,
             Catch::Contains("torch.manual_seed") && Catch::Contains("manual_seed(SEED)"));
  // A batch made from Python data that differs: the first op to read it, from the host.
  report = Diff(dir, CpuProgram(1, 5, 9), CpuProgram(1, 6, 9));
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kPropagated);
  CHECK(report.first_divergence->op.sequence == 1);
  CHECK(report.first_divergence->from_host);
  CHECK_THAT(report.first_divergence->what, Catch::Contains("it came from Python"));
  REQUIRE(report.first_divergence->hint.has_value());
  CHECK_THAT(report.first_divergence->hint->fix, Catch::Contains("random.seed"));
  CHECK_THAT(RenderDiffText(report), Catch::Contains("(not in a device allocation, 4096 B"));
  // A factory given other Python values: propagated too, not a nondeterministic op.
  report = Diff(dir, CpuProgram(1, 5, 9), CpuProgram(1, 5, 10));
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kPropagated);
  CHECK(report.first_divergence->op.sequence == 2);
  CHECK(report.first_divergence->from_host);
}

// A copy on one stream and a GEMM on another that reads what it wrote; `between` adds ops
// between them (an event record and wait, a synchronisation). The GEMM's input differs between
// the runs (`read`).
std::vector<Record> TwoStreams(uint64_t read, const std::vector<OpRecord>& between,
                               uint64_t writer_stream = 1, bool non_blocking = true) {
  std::vector<OpRecord> ops;
  for (uint32_t stream : {1u, 2u}) {
    OpRecord create;
    create.name = "cuStreamCreateWithPriority";
    create.stream_id = stream;
    create.args = {{"flags", uint64_t{non_blocking ? 1u : 0u}}, {"priority", int64_t{0}}};
    ops.push_back(create);
  }
  OpRecord copy;
  copy.kind = OpKind::kMemcpy;
  copy.name = "cuMemcpyHtoDAsync_v2";
  copy.stream_id = static_cast<uint32_t>(writer_stream);
  copy.args = {Pointer("dstDevice", 5)};
  copy.outputs = {Buffer("dst", 5, 55)};
  ops.push_back(copy);
  for (const OpRecord& op : between) ops.push_back(op);
  OpRecord gemm;
  gemm.kind = OpKind::kCublasGemm;
  gemm.name = "cublasSgemm_v2";
  gemm.stream_id = 2;
  gemm.inputs = {Buffer("B", 5, read)};
  gemm.outputs = {Buffer("C", 6, read + 100)};
  ops.push_back(gemm);
  std::vector<Record> records;
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].sequence = i;
    records.push_back(ops[i]);
  }
  return records;
}

OpRecord StreamOp(const char* name, uint32_t stream, OpKind kind = OpKind::kOther) {
  OpRecord op;
  op.kind = kind;
  op.name = name;
  op.stream_id = stream;
  op.args = {{"event", uint64_t{9}}};
  return op;
}

TEST_CASE(
    "a read on one stream of what another wrote, with nothing ordering them, is named a "
    "race between streams",
    "[replayer]") {
  TempDir dir;
  const auto race_of = [&](const std::vector<OpRecord>& between, uint64_t writer_stream = 1,
                           bool non_blocking = true) -> std::string {
    const DiffReport report = Diff(dir, TwoStreams(1, between, writer_stream, non_blocking),
                                   TwoStreams(2, between, writer_stream, non_blocking));
    REQUIRE(report.first_divergence.has_value());
    const Divergence& d = *report.first_divergence;
    REQUIRE(d.klass == DivergenceClass::kPropagated);
    REQUIRE(d.root.has_value());
    CHECK(d.root->name == "cuMemcpyHtoDAsync_v2");
    for (const std::string& line : d.evidence) {
      if (line.find("a race between streams") != std::string::npos) {
        CHECK(d.hint.has_value());
        CHECK_THAT(d.hint->fix, Catch::Contains("cudaStreamWaitEvent"));
        return line;
      }
    }
    return "";
  };
  // No wait: the race, naming both ops.
  const std::string race = race_of({});
  CHECK_THAT(race, Catch::Contains("nothing orders op 2 (cuMemcpyHtoDAsync_v2, the write) "
                                   "before op 3 (cublasSgemm_v2, the read)"));
  // The reading stream waits for an event recorded after the write: ordered.
  CHECK(race_of({StreamOp("cuEventRecord", 1), StreamOp("cuStreamWaitEvent", 2)}).empty());
  // A wait for an event recorded before the write orders nothing.
  CHECK_FALSE(race_of({StreamOp("cuStreamWaitEvent", 2)}).empty());
  // A host synchronisation in between: ordered (as far as the trace can tell).
  CHECK(race_of({StreamOp("cuStreamSynchronize", 1, OpKind::kSynchronize)}).empty());
  // The legacy stream orders blocking streams: a write there, read on a blocking stream.
  CHECK(race_of({}, 0, false).empty());
  CHECK_FALSE(race_of({}, 0, true).empty());  // a non-blocking reader is not ordered by it
}

TEST_CASE("a different Philox offset is an RNG-state divergence", "[replayer]") {
  TempDir dir;
  const DiffReport report =
      Diff(dir, Program(), Program([](auto& ops) { ops[3].rng->offset = 12; }));
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kRngState);
  CHECK(report.first_divergence->op.sequence == 3);
  CHECK_THAT(report.first_divergence->evidence[1], Catch::Contains("offset 12"));
  CHECK_THAT(report.first_divergence->hint->fix, Catch::Contains("torch.manual_seed"));
}

TEST_CASE(
    "a CUDA graph replayed with a different Philox seed is an RNG-state divergence at "
    "its launch, with the CUDA graphs hint",
    "[replayer]") {
  // philox_dropout --graph without a seed: the kernel writing the seed word before the replay
  // differs in a by-value argument (a structural note), the graph launch in the state it read.
  auto graph_program = [](uint64_t seed) {
    return Program([seed](std::vector<OpRecord>& ops) {
      ops[2].kind = OpKind::kKernelLaunch;
      ops[2].name = "Fill(long*, long, int)";
      ops[2].algorithm.reset();
      ops[2].inputs.clear();
      ops[2].outputs.clear();
      ops[2].args = {Pointer("arg0", 5), {"arg1", Argument::Bytes{std::string(8, char(seed))}}};
      ops[3].kind = OpKind::kGraphLaunch;
      ops[3].name = "cuGraphLaunch";
      ops[3].args = {{"graphExec", uint64_t{1}},
                     {"graph", uint64_t{1}},
                     {"philoxIntragraph", std::string("0,4096")}};
      ops[3].rng = format::RngState{"philox", seed, 0, 0, "", false};
      ops[4].outputs[0].digest.lo ^= seed;  // the copy out differs too, later
    });
  };
  TempDir dir;
  const DiffReport report = Diff(dir, graph_program(1), graph_program(2));
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kRngState);
  CHECK(d.op.sequence == 3);
  CHECK(d.op.kind == OpKind::kGraphLaunch);
  CHECK_THAT(d.evidence[0], Catch::Contains("philox seed 1 offset 0"));
  CHECK_THAT(d.evidence[1], Catch::Contains("philox seed 2 offset 0"));
  REQUIRE(d.hint.has_value());
  CHECK_THAT(d.hint->framework_op, Catch::Contains("CUDA graph"));
  CHECK_THAT(d.hint->fix, Catch::Contains("torch.manual_seed") && Catch::Contains("replay"));
  REQUIRE(report.first_structural.has_value());
  CHECK(report.first_structural->a->sequence == 2);
  CHECK_THAT(report.first_structural->what, Catch::Contains("different arguments"));
  const std::string text = RenderDiffText(report);
  CHECK_THAT(text, Catch::StartsWith("error[rng_state]: op 3 consumed different random state"));
}

TEST_CASE("a different engine picked by benchmark is an algorithm-selection divergence",
          "[replayer]") {
  TempDir dir;
  const DiffReport report = Diff(dir, Program(), Program([](auto& ops) {
    ops[2].algorithm->id = 5;
    ops[2].algorithm->name = "engine 5";
    ops[2].algorithm->source = format::ChoiceSource::kBenchmark;
    ops[2].outputs[0].digest.hi ^= 4;
  }));
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kAlgorithmSelection);
  CHECK_THAT(d.evidence[1], Catch::Contains("engine 5") && Catch::Contains("(picked by benchmark)"));
  CHECK_THAT(d.hint->fix, Catch::Contains("--pin"));
}

TEST_CASE("with the same fingerprint, a different algorithm wins over arguments that follow it",
          "[replayer]") {
  // A framework sizes the workspace for the algorithm it chose: the workspace argument differs
  // because the algorithm does, and the report says so rather than "different arguments".
  TempDir dir;
  const auto with = [](uint64_t workspace, int64_t algorithm, const char* fingerprint) {
    return [=](std::vector<OpRecord>& ops) {
      ops[2].args.push_back({"fingerprint", std::string(fingerprint)});
      ops[2].args.push_back({"workspace_bytes", workspace});
      ops[2].algorithm->id = algorithm;
      ops[2].outputs[0].digest.hi ^= static_cast<uint64_t>(algorithm);
    };
  };
  const DiffReport selection = Diff(dir, Program(with(1024, 1, "conv x=[8,3,32,32]")),
                                    Program(with(4096, 3, "conv x=[8,3,32,32]")));
  REQUIRE(selection.first_divergence.has_value());
  CHECK(selection.first_divergence->klass == DivergenceClass::kAlgorithmSelection);
  CHECK(selection.structural_differences == 0);
  // Another problem (fingerprints differ): the program asked for something else.
  const DiffReport other = Diff(dir, Program(with(1024, 1, "conv x=[8,3,32,32]")),
                                Program(with(4096, 3, "conv x=[8,3,64,64]")));
  CHECK(other.structural_differences == 1);
}

// Program() with op 2 (the cuDNN execute) captured: its input `x` and output `y` stored as blobs
// through the writer, as `record --capture` does.
std::string WriteCaptured(const TempDir& dir, const std::string& name,
                          const std::vector<float>& x, const std::vector<float>& y) {
  const std::string path = dir / name;
  auto writer = format::TraceWriter::Create(path, testing::SampleHeader());
  REQUIRE(writer.ok());
  const auto blob = [&](const std::vector<float>& values) {
    const auto id = (*writer)->PutBlob(std::as_bytes(std::span(values)));
    REQUIRE(id.ok());
    return kernels::ToHex({id->lo, id->hi});
  };
  std::vector<Record> records = Program([&](auto& ops) {
    ops[2].args.push_back({"blob:in:x", blob(x)});
    ops[2].args.push_back({"blob:out:y", blob(y)});
  });
  for (const Record& record : records) (*writer)->Append(record);
  REQUIRE((*writer)->Close().ok());
  return path;
}

TEST_CASE("captured outputs that differ give the exact size of the divergence element by element",
          "[replayer]") {
  TempDir dir;
  const std::vector<float> x = {1, 2, 3, 4};
  auto report = DiffTraces(WriteCaptured(dir, "a.ndt", x, {1.0f, 2.0f, 3.0f, 4.0f}),
                           WriteCaptured(dir, "b.ndt", x, {1.0f, 2.5f, 3.0f, -4.0f}));
  REQUIRE(report.ok());
  CHECK(report->structural_differences == 0);  // blob ids are data, not arguments
  REQUIRE(report->first_divergence);
  const Divergence& d = *report->first_divergence;
  CHECK(d.klass == DivergenceClass::kNondeterministicOp);
  CHECK(d.op.sequence == 2);
  CHECK(d.what == "the op gave different results from identical inputs");
  REQUIRE(d.exact);
  CHECK(d.exact->role == "y");
  CHECK(d.exact->dtype == DType::kF32);  // from the cudnn op's output digest of the same role
  CHECK(d.exact->elements == 4);
  CHECK(d.exact->differing == 2);
  CHECK(d.exact->first_index == 1);
  CHECK(d.exact->first_a == 2.0);
  CHECK(d.exact->first_b == 2.5);
  CHECK(d.exact->max_abs_diff == 8.0);
  CHECK(d.exact->max_abs_index == 3);
  CHECK(d.exact->max_rel_diff == 2.0);
  const std::string text = RenderDiffText(*report);
  CHECK_THAT(text, Catch::Contains("exact (captured `y`, f32): 2 of 4 elements differ, the "
                                   "first at [1]: 2 (A) vs 2.5 (B); largest |A-B| 8 at [3]"));
  const auto j = nlohmann::json::parse(RenderDiffJson(*report));
  CHECK(j.at("first_divergence").at("exact").at("differing") == 2);
  CHECK(j.at("first_divergence").at("exact").at("dtype") == "f32");
}

TEST_CASE("a captured input that differs makes the op's divergence propagated", "[replayer]") {
  TempDir dir;
  auto report = DiffTraces(WriteCaptured(dir, "a.ndt", {1, 2}, {3, 4}),
                           WriteCaptured(dir, "b.ndt", {1, 2.5f}, {3, 4.5f}));
  REQUIRE(report.ok());
  CHECK(report->structural_differences == 0);
  REQUIRE(report->first_divergence);
  CHECK(report->first_divergence->klass == DivergenceClass::kPropagated);
  CHECK(report->first_divergence->op.sequence == 2);
  CHECK_THAT(report->first_divergence->evidence.front(),
             Catch::StartsWith("captured input `x` differs"));
}

TEST_CASE("identical captures of the same op are identical runs", "[replayer]") {
  TempDir dir;
  auto report = DiffTraces(WriteCaptured(dir, "a.ndt", {1, 2}, {3, 4}),
                           WriteCaptured(dir, "b.ndt", {1, 2}, {3, 4}));
  REQUIRE(report.ok());
  CHECK(report->identical());
}

// A training step shaped as train_loop.cu: a data-loader thread stages batches with copies on
// its own stream into one segment of a caching allocator (allocation 5: the op's batch at +0, the
// next batch at +1024), and a launch on the compute stream captured whole allocations
// (`blob:in:alloc5`, `blob:out:alloc6`, tracer/capture.h). `segment_*`: allocation 5's bytes in
// and out; `out`: allocation 6's after the launch. `next` places the op that points at the next
// batch: its sequence (before or after the launch) and stream.
struct NextBatch {
  uint64_t sequence = 3;  // after the launch (2): issued later, written while it was captured
  uint32_t stream = 2;    // the copy stream
  uint64_t offset = 1024;
  uint64_t allocation = 5;
};

std::string WriteStagedLaunch(const TempDir& dir, const std::string& name,
                              const std::string& segment_in, const std::string& segment_out,
                              const std::string& out, NextBatch next = {},
                              std::optional<Argument> extra_argument = std::nullopt,
                              std::string out_before = std::string()) {
  const std::string path = dir / name;
  auto writer = format::TraceWriter::Create(path, testing::SampleHeader());
  REQUIRE(writer.ok());
  const auto blob = [&](const std::string& bytes) {
    const auto id = (*writer)->PutBlob(std::as_bytes(std::span(bytes)));
    REQUIRE(id.ok());
    return kernels::ToHex({id->lo, id->hi});
  };
  constexpr uint64_t kSegment = 0x7f0000500000, kOutput = 0x7f0000600000;
  const auto copy = [&](uint64_t sequence, uint32_t stream, uint64_t offset,
                        uint64_t allocation = 5) {
    OpRecord op;
    op.sequence = sequence;
    op.thread_id = 1;
    op.stream_id = stream;
    op.kind = OpKind::kMemcpy;
    op.name = "cuMemcpyHtoDAsync_v2";
    op.args = {
        {"dst", DevicePointer{allocation, offset, (allocation == 5 ? kSegment : kOutput) + offset}},
        {"ByteCount", uint64_t{1024}}};
    return op;
  };
  OpRecord launch;
  launch.sequence = 2;
  launch.thread_id = 0;
  launch.stream_id = 1;
  launch.kind = OpKind::kKernelLaunch;
  launch.name = "ColumnDotAtomic(float const*, float*, int)";
  launch.args = {
      {"arg0", DevicePointer{5, 0, kSegment}},
      {"arg1", DevicePointer{6, 0, kOutput}},
      {"arg2", Argument::Bytes{std::string("\x00\x01\x00\x00", 4)}},
      {"alloc5", DevicePointer{5, 0, kSegment}},
      {"alloc5.bytes", uint64_t{segment_in.size()}},
      {"blob:in:alloc5", blob(segment_in)},
      {"alloc6", DevicePointer{6, 0, kOutput}},
      {"alloc6.bytes", uint64_t{out.size()}},
      {"blob:in:alloc6", blob(out_before.empty() ? std::string(out.size(), '\0') : out_before)},
      {"blob:out:alloc5", blob(segment_out)},
      {"blob:out:alloc6", blob(out)}};
  if (extra_argument) launch.args.insert(launch.args.begin() + 3, *extra_argument);
  std::vector<Record> records = {copy(0, 2, 0), launch,
                                 copy(next.sequence, next.stream, next.offset, next.allocation)};
  std::sort(records.begin(), records.end(), [](const Record& x, const Record& y) {
    return std::get<OpRecord>(x).sequence < std::get<OpRecord>(y).sequence;
  });
  for (const Record& record : records) (*writer)->Append(record);
  REQUIRE((*writer)->Close().ok());
  return path;
}

// 2048 bytes of a segment: the op's batch (+0) and the next (+1024), each filled with `op` and
// `next`.
std::string Segment(char op, char next) {
  return std::string(1024, op) + std::string(1024, next);
}

bool HasNote(const DiffReport& report, const std::string& text) {
  return std::any_of(report.notes.begin(), report.notes.end(),
                     [&](const std::string& note) { return note.find(text) != std::string::npos; });
}

TEST_CASE(
    "a captured allocation that differs only in another tensor of its segment is "
    "placement: the op is nondeterministic from identical inputs",
    "[replayer]") {
  TempDir dir;
  // The next batch was half written when run B captured the launch: its bytes differ, the op's
  // batch does not; the op's output differs (atomics).
  auto report =
      DiffTraces(WriteStagedLaunch(dir, "a.ndt", Segment('x', 'n'), Segment('x', 'n'), "out-A"),
                 WriteStagedLaunch(dir, "b.ndt", Segment('x', '?'), Segment('x', 'n'), "out-B"));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence);
  const Divergence& d = *report->first_divergence;
  CHECK(d.klass == DivergenceClass::kNondeterministicOp);
  CHECK(d.op.sequence == 2);
  CHECK(d.what == "the op gave different results from identical inputs");
  CHECK_THAT(d.evidence.front(), Catch::Contains("captured input `alloc5` differs only outside"));
  REQUIRE(d.exact);
  CHECK(d.exact->role == "alloc6");
  CHECK(report->divergent_ops == 1);
  CHECK(HasNote(*report,
                "1 captured whole allocation(s) of kernel launches differ only outside "
                "the tensors their ops point at"));
  CHECK(HasNote(*report, "op 2, `alloc5`: bytes 1024..2048 differ first; it points at +0"));
}

TEST_CASE(
    "a captured allocation that differs only in another tensor, with equal outputs, "
    "leaves the runs identical",
    "[replayer]") {
  TempDir dir;
  // The next batch differs before and after the launch (still being written in run B).
  auto report =
      DiffTraces(WriteStagedLaunch(dir, "a.ndt", Segment('x', 'n'), Segment('x', 'n'), "out"),
                 WriteStagedLaunch(dir, "b.ndt", Segment('x', '?'), Segment('x', '!'), "out"));
  REQUIRE(report.ok());
  CHECK(report->identical());
  CHECK(report->divergent_ops == 0);
  CHECK(HasNote(*report, "2 captured whole allocation(s)"));
}

TEST_CASE(
    "a captured allocation that differs inside the op's tensor is still a propagated "
    "divergence",
    "[replayer]") {
  TempDir dir;
  std::string changed = Segment('x', 'n');
  changed[1023] = 'y';  // the last byte of the op's batch
  auto report =
      DiffTraces(WriteStagedLaunch(dir, "a.ndt", Segment('x', 'n'), Segment('x', 'n'), "out-A"),
                 WriteStagedLaunch(dir, "b.ndt", changed, changed, "out-B"));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence);
  const Divergence& d = *report->first_divergence;
  CHECK(d.klass == DivergenceClass::kPropagated);
  CHECK(d.op.sequence == 2);
  CHECK_THAT(d.evidence.front(), Catch::StartsWith("captured input `alloc5` differs: blob"));
  REQUIRE(d.root);
  CHECK(d.root->sequence == 0);  // the copy that staged the op's batch
  CHECK_FALSE(HasNote(*report, "captured whole allocation"));
}

TEST_CASE(
    "where a captured op's tensor ends is known only from tensor starts other streams' ops "
    "point at",
    "[replayer]") {
  TempDir dir;
  const auto diff = [&](NextBatch next) {
    auto report = DiffTraces(
        WriteStagedLaunch(dir, "a.ndt", Segment('x', 'n'), Segment('x', 'n'), "out-A", next),
        WriteStagedLaunch(dir, "b.ndt", Segment('x', '?'), Segment('x', 'n'), "out-B", next));
    REQUIRE(report.ok());
    REQUIRE(report->first_divergence);
    return report->first_divergence->klass;
  };
  // The copy into the next batch, issued before or after the launch on the copy stream: the
  // op's batch ends where it starts.
  CHECK(diff({1, 2, 1024}) == DivergenceClass::kNondeterministicOp);
  CHECK(diff({3, 2, 1024}) == DivergenceClass::kNondeterministicOp);
  // No op points at +1024 (the next batch starts at +1536): the op's batch may extend over the
  // bytes that differ.
  CHECK(diff({3, 2, 1536}) == DivergenceClass::kPropagated);
  // Issued after the launch on the launch's own stream: it ran after it, so what it found at
  // +1024 does not bound what the launch read (a smaller tensor cut from a freed block).
  CHECK(diff({3, 1, 1024}) == DivergenceClass::kPropagated);
}

TEST_CASE("the exact size of a captured allocation's divergence counts only the op's tensors",
          "[replayer]") {
  TempDir dir;
  // Allocation 6 holds the op's output (+0) and another tensor (+1024) that differs too.
  const NextBatch other_tensor{3, 2, 1024, 6};
  std::string out_b(2048, 'o');
  out_b[0] = 'p';     // the op's first float
  out_b[1500] = 'q';  // another tensor's
  auto report = DiffTraces(
      WriteStagedLaunch(dir, "a.ndt", Segment('x', 'n'), Segment('x', 'n'), std::string(2048, 'o'),
                        other_tensor),
      WriteStagedLaunch(dir, "b.ndt", Segment('x', 'n'), Segment('x', 'n'), out_b, other_tensor));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence);
  const Divergence& d = *report->first_divergence;
  CHECK(d.klass == DivergenceClass::kNondeterministicOp);
  REQUIRE(d.exact);
  CHECK(d.exact->role == "alloc6");
  CHECK(d.exact->dtype == DType::kF32);
  CHECK(d.exact->differing == 1);
  CHECK(d.exact->first_index == 0);
}

TEST_CASE(
    "a captured allocation an op may reach through a pointer held in bytes is compared "
    "whole",
    "[replayer]") {
  TempDir dir;
  // The address of the next batch (+1024), 8-byte aligned.
  std::string bytes(16, '\0');
  const uint64_t address = 0x7f0000500000 + 1024;
  std::memcpy(bytes.data() + 8, &address, 8);
  std::optional<Argument> by_value;
  std::string table;
  SECTION("in a parameter passed by value (a struct)") {
    by_value = Argument{"arg3", Argument::Bytes{bytes}};
  }
  SECTION("in a captured allocation (a table of pointers)") {
    table = bytes;
  }
  auto report = DiffTraces(WriteStagedLaunch(dir, "a.ndt", Segment('x', 'n'), Segment('x', 'n'),
                                             "out-A", {}, by_value, table),
                           WriteStagedLaunch(dir, "b.ndt", Segment('x', '?'), Segment('x', 'n'),
                                             "out-B", {}, by_value, table));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence);
  CHECK(report->first_divergence->klass == DivergenceClass::kPropagated);
}

TEST_CASE("inputs that already differ point back to the uncovered kernel that wrote them",
          "[replayer]") {
  TempDir dir;
  const DiffReport report = Diff(dir, Program(), Program([](auto& ops) {
    ops[2].inputs[0].digest.lo ^= 1;
    ops[2].outputs[0].digest.lo ^= 1;
  }));
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kPropagated);
  CHECK(d.op.sequence == 2);
  REQUIRE(d.root.has_value());
  CHECK(d.root->sequence == 1);
  REQUIRE(d.hint.has_value());  // the suspect kernel's hint
  CHECK_THAT(d.hint->framework_op, Catch::Contains("index_add_"));
  CHECK(d.window_begin == std::optional<uint64_t>(1));
  CHECK(d.window_end == std::optional<uint64_t>(2));
}

TEST_CASE("a copy of device data that differs points at the kernel that last wrote it",
          "[replayer]") {
  TempDir dir;
  const DiffReport report =
      Diff(dir, Program(), Program([](auto& ops) { ops[4].outputs[0].digest.lo ^= 2; }));
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kPropagated);
  CHECK(d.op.sequence == 4);
  REQUIRE(d.root.has_value());
  CHECK(d.root->sequence == 3);
  CHECK_THAT(d.root->name, Catch::Contains("fused_dropout_kernel_vec"));
  CHECK(d.window_begin == std::optional<uint64_t>(3));
}

TEST_CASE("different host data entering the GPU is traced to the CPU side", "[replayer]") {
  TempDir dir;
  const DiffReport report =
      Diff(dir, Program(), Program([](auto& ops) { ops[0].inputs[0].digest.lo = 101; }));
  REQUIRE(report.first_divergence.has_value());
  CHECK(report.first_divergence->klass == DivergenceClass::kPropagated);
  CHECK(report.first_divergence->op.sequence == 0);
  CHECK_THAT(report.first_divergence->what, Catch::Contains("host data"));
  CHECK(report.first_divergence->from_host);
  CHECK_THAT(report.first_divergence->hint->fix, Catch::Contains("DataLoader"));
}

TEST_CASE("a state digest that differs with no op-level divergence is uncovered", "[replayer]") {
  TempDir dir;
  std::vector<Record> b = Program();
  std::get<format::StateDigestRecord>(b.back()).allocations[1].digest.lo ^= 1;
  const DiffReport report = Diff(dir, Program(), b);
  REQUIRE(report.first_divergence.has_value());
  const Divergence& d = *report.first_divergence;
  CHECK(d.klass == DivergenceClass::kUncovered);
  CHECK(d.window_begin == std::optional<uint64_t>(0));
  CHECK(d.window_end == std::optional<uint64_t>(4));
  CHECK_THAT(d.evidence[0], Catch::Contains("a4+0"));
}

TEST_CASE("an op present in one run only is a structural difference and alignment recovers",
          "[replayer]") {
  TempDir dir;
  const DiffReport report = Diff(dir, Program(), Program([](auto& ops) {
    OpRecord extra = ops[1];
    extra.name = "void at::native::elementwise_kernel<128, 4>(...)";
    ops.insert(ops.begin() + 1, extra);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].sequence = i;
  }));
  REQUIRE(report.first_structural.has_value());
  CHECK_FALSE(report.first_structural->a.has_value());
  REQUIRE(report.first_structural->b.has_value());
  CHECK_THAT(report.first_structural->b->name, Catch::Contains("elementwise_kernel"));
  CHECK(report.structural_differences == 1);
  CHECK(report.lane_tail_ops == 0);  // in the middle of its lane: no run stopped earlier
  CHECK_FALSE(report.differs_only_at_lane_tails());
  CHECK(report.ops_compared == 5);
  CHECK_FALSE(report.first_divergence.has_value());
  CHECK_FALSE(report.identical());
}

// Program() with a second thread (a data loader's) that issued `loader_ops` copies on its own
// stream, the last `after_exit` of them after the exit state digest (sequences go on from 5).
std::vector<Record> WithLoader(std::vector<Record> records, uint64_t loader_ops,
                               uint64_t after_exit = 0) {
  std::vector<Record> loader;
  for (uint64_t i = 0; i < loader_ops; ++i) {
    OpRecord op;
    op.kind = OpKind::kMemcpy;
    op.name = "cuMemcpyHtoDAsync_v2";
    op.thread_id = 1;
    op.stream_id = 2;
    op.args = {Pointer("dstDevice", 10 + i), {"ByteCount", uint64_t{4096}}};
    op.inputs = {Buffer("src", 0, 1000 + i)};
    loader.push_back(op);
  }
  const size_t before_exit = records.size() - 1;  // the exit state digest is last
  records.insert(records.begin() + static_cast<long>(before_exit), loader.begin(),
                 loader.end() - static_cast<long>(after_exit));
  records.insert(records.end(), loader.end() - static_cast<long>(after_exit), loader.end());
  uint64_t sequence = 5;
  uint64_t last = 0;  // the last op issued so far, in file order
  for (Record& record : records) {
    if (auto* op = std::get_if<OpRecord>(&record)) {
      if (op->thread_id == 1) op->sequence = sequence++;
      last = op->sequence;
    } else if (auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      state->after_op = last;
    }
  }
  return records;
}

TEST_CASE("ops after the other run's last op in their lane are counted as lane tails",
          "[replayer]") {
  TempDir dir;
  // Run B's loader thread got two copies further before the program ended.
  const DiffReport report = Diff(dir, WithLoader(Program(), 3), WithLoader(Program(), 5));
  CHECK(report.structural_differences == 2);
  CHECK(report.lane_tail_ops == 2);
  CHECK(report.differs_only_at_lane_tails());
  CHECK_FALSE(report.identical());
  CHECK_FALSE(report.first_divergence.has_value());
  CHECK_THAT(report.notes, Catch::VectorContains(std::string(
                               "2 of the 2 structural difference(s) are ops after the other "
                               "run's last op in their lane: that run stopped earlier there "
                               "(killed, failed, or ended while a thread was still issuing "
                               "work)")));
  // A divergence besides them is still one.
  const DiffReport diverged =
      Diff(dir, WithLoader(Program(), 3),
           WithLoader(Program([](auto& ops) { ops[4].outputs[0].digest.lo = 7; }), 5));
  CHECK(diverged.lane_tail_ops == 2);
  CHECK_FALSE(diverged.differs_only_at_lane_tails());
}

TEST_CASE("an exit state digest after which a thread still recorded ops is not compared",
          "[replayer]") {
  TempDir dir;
  const auto differing_exit = [](std::vector<Record> records) {
    std::get<format::StateDigestRecord>(records.back()).allocations[1].digest.lo ^= 1;
    return records;
  };
  // The loader's last copy came after the digest (the program exited under it) in both runs.
  std::vector<Record> b = WithLoader(Program(), 3, 1);
  for (Record& record : b) {
    if (auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      state->allocations[1].digest.lo ^= 1;
    }
  }
  const DiffReport report = Diff(dir, WithLoader(Program(), 3, 1), b);
  CHECK_FALSE(report.first_divergence.has_value());
  CHECK(report.identical());
  CHECK_THAT(report.notes, Catch::VectorContains(std::string(
                               "the state digest at exit differs; not compared: ops were recorded "
                               "after it, so another thread was still issuing work when the "
                               "program exited, and how far it had got varies from run to run")));
  // Taken after every op, a differing exit digest is memory that diverged.
  const DiffReport after_all =
      Diff(dir, WithLoader(Program(), 3), differing_exit(WithLoader(Program(), 3)));
  REQUIRE(after_all.first_divergence.has_value());
  CHECK(after_all.first_divergence->klass == DivergenceClass::kUncovered);
}

// A thread pool: two worker threads score 4 tasks, each a GEMM of the task's input (on the
// thread's own cuBLAS handle) and then a ReLU, as a ThreadPoolExecutor hands tasks to whichever
// thread is free. `order` gives the thread (1 or 2) of each task in turn; `change` edits the
// ops before they are written.
std::vector<Record> ThreadPool(const std::vector<uint32_t>& order,
                               const std::function<void(std::vector<OpRecord>&)>& change = {}) {
  std::vector<OpRecord> ops;
  for (size_t task = 0; task < order.size(); ++task) {
    for (int step = 0; step < 2; ++step) {
      OpRecord op;
      op.kind = OpKind::kFrameworkOp;
      op.name = step == 0 ? "aten::addmm" : "aten::relu";
      op.thread_id = order[task];
      op.sequence = ops.size();
      op.start_ns = 1000 * ops.size();
      if (step == 0) op.args = {{"handle", uint64_t{order[task]}}, {"m", int64_t{16}}};
      op.inputs = {Buffer("self", 10 + ops.size(), step == 0 ? 100 + task : 200 + task)};
      op.outputs = {Buffer("out", 20 + ops.size(), step == 0 ? 200 + task : 300 + task)};
      ops.push_back(op);
    }
  }
  if (change) change(ops);
  return {ops.begin(), ops.end()};
}

TEST_CASE("the same ops on the same data handed to other threads are the same run", "[replayer]") {
  TempDir dir;
  // Run B's threads took tasks 2 and 3 the other way round: lane by lane, thread 1's second
  // task and thread 2's second task differ; as a whole, the same ops computed the same.
  const DiffReport report = Diff(dir, ThreadPool({1, 2, 1, 2}), ThreadPool({1, 2, 2, 1}));
  CHECK(report.identical());
  CHECK(report.reordered);
  CHECK_FALSE(report.first_divergence.has_value());
  CHECK(report.structural_differences == 0);
  CHECK_THAT(report.notes,
             Catch::VectorContains(std::string(
                 "the same 8 ops, with the same arguments and the same data read and written, ran "
                 "in another order or on other threads in run B (4 aligned ops differed and 0 "
                 "were in one run's lane only: work handed to whichever thread was free, a thread "
                 "pool or a work queue): the runs computed the same")));
  // One task's ReLU wrote something else: a divergence, whichever threads ran what.
  const DiffReport diverged =
      Diff(dir, ThreadPool({1, 2, 1, 2}),
           ThreadPool({1, 2, 2, 1}, [](auto& ops) { ops[7].outputs[0].digest.lo ^= 1; }));
  CHECK_FALSE(diverged.identical());
  CHECK_FALSE(diverged.reordered);
  CHECK(diverged.first_divergence.has_value());
  // A task done twice and another not at all: not the same ops.
  const DiffReport twice =
      Diff(dir, ThreadPool({1, 2, 1, 2}), ThreadPool({1, 2, 2, 1}, [](auto& ops) {
             ops[6].inputs = ops[4].inputs;
             ops[6].outputs = ops[4].outputs;
             ops[7].inputs = ops[5].inputs;
             ops[7].outputs = ops[5].outputs;
           }));
  CHECK_FALSE(twice.identical());
  CHECK_FALSE(twice.reordered);
  // A GEMM of another size: an argument that is behaviour, not the handle's ordinal.
  const DiffReport resized =
      Diff(dir, ThreadPool({1, 2, 1, 2}),
           ThreadPool({1, 2, 2, 1}, [](auto& ops) { ops[6].args[1].value = int64_t{32}; }));
  CHECK_FALSE(resized.identical());
  CHECK_FALSE(resized.reordered);
  // Where each thread ran the same tasks, nothing was reordered.
  const DiffReport same = Diff(dir, ThreadPool({1, 2, 1, 2}), ThreadPool({1, 2, 1, 2}));
  CHECK(same.identical());
  CHECK_FALSE(same.reordered);
}

TEST_CASE("ops of several threads align by lane whatever their order in the file",
          "[replayer]") {
  TempDir dir;
  // Each run appends the same per-thread op streams from 4 threads that race.
  auto write_run = [&](const std::string& name) {
    const std::string path = dir / name;
    auto writer = format::TraceWriter::Create(path, testing::SampleHeader());
    REQUIRE(writer.ok());
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 0; i < 2000; ++i) {
          OpRecord op = testing::SampleOp(i * 4 + t, t);
          op.stream_id = t;
          (*writer)->Append(op);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    REQUIRE((*writer)->Close().ok());
    return path;
  };
  auto report = DiffTraces(write_run("a.ndt"), write_run("b.ndt"));
  REQUIRE(report.ok());
  CHECK(report->identical());
  CHECK(report->ops_compared == 8000);
}

// Peak RSS, in KiB, of a child process that diffs `a` with `b` (a fresh process: its peak is
// its own, from the same starting point as every other such child of this test).
long DiffPeakRssKib(const std::string& a, const std::string& b) {
  const pid_t child = ::fork();
  if (child == 0) {
    const StatusOr<DiffReport> report = DiffTraces(a, b);
    ::_exit(report.ok() ? 0 : 1);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(::wait4(child, &status, 0, &usage) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return usage.ru_maxrss;
}

TEST_CASE("diff of a run against a cut or shorter copy takes no more memory than an identical pair",
          "[replayer]") {
  TempDir dir;
  constexpr uint64_t kOps = 150000;
  const auto write = [&](const std::string& name, uint64_t ops) {
    const std::string path = dir / name;
    auto writer = format::TraceWriter::Create(path, testing::SampleHeader());
    REQUIRE(writer.ok());
    for (uint64_t i = 0; i < ops; ++i) (*writer)->Append(testing::SampleOp(i));
    REQUIRE((*writer)->Close().ok());
    return path;
  };
  const std::string a = write("a.ndt", kOps);
  const std::string same = write("same.ndt", kOps);
  const std::string shorter = write("shorter.ndt", kOps / 10);
  const std::string cut = dir / "cut.ndt";
  std::filesystem::copy_file(a, cut);
  std::filesystem::resize_file(cut, std::filesystem::file_size(a) / 2);

  // Measured first, each in a child process (this process has not read a trace yet). Before,
  // the ops of the longer run waited for partners that never came: tens of thousands held at
  // once, tens of MiB.
  const long identical = DiffPeakRssKib(a, same);
  const long against_cut = DiffPeakRssKib(a, cut);
  const long against_shorter = DiffPeakRssKib(shorter, a);
  INFO("peak RSS KiB: identical " << identical << ", cut " << against_cut << ", shorter "
                                  << against_shorter);
#if defined(__SANITIZE_ADDRESS__)
  // ASan keeps freed blocks in quarantine (up to 256 MiB) and pads every block, so its peak
  // follows how much was freed, not how much was held at once: the dev build checks the bound.
  WARN("peak RSS bound not checked under AddressSanitizer");
#else
  CHECK(against_cut < identical + 16 * 1024);
  CHECK(against_shorter < identical + 16 * 1024);
#endif

  const auto cut_report = DiffTraces(a, cut);
  REQUIRE(cut_report.ok());
  CHECK(cut_report->incomplete_b.has_value());
  CHECK(cut_report->ops_compared == cut_report->ops_b);
  CHECK(cut_report->structural_differences == kOps - cut_report->ops_b);
  const auto shorter_report = DiffTraces(shorter, a);
  REQUIRE(shorter_report.ok());
  CHECK(shorter_report->ops_compared == kOps / 10);
  CHECK(shorter_report->structural_differences == kOps - kOps / 10);
}

TEST_CASE("damage is listed apart from the report, whichever run it is in", "[replayer]") {
  TempDir dir;
  const std::string a = Write(dir, "a.ndt", Program());
  const std::string b = Write(dir, "b.ndt", Program());
  std::string bytes;
  {
    std::ifstream in(b, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(b, std::ios::binary | std::ios::trunc) << bytes;
  const auto report = DiffTraces(a, b);
  REQUIRE(report.ok());
  CHECK(report->damage_a.empty());
  REQUIRE(report->damage_b.size() >= 1);
  CHECK(report->damaged());
  CHECK(report->damage_b.front().begin <= bytes.size() / 2);
  CHECK(report->warnings.empty());
  CHECK_THAT(DamageText(*report), Catch::StartsWith(b + ": damaged trace: "));
  CHECK(RenderDiffText(*report).find("bytes ") == std::string::npos);
}

TEST_CASE("another GPU model makes the runs not comparable", "[replayer]") {
  TempDir dir;
  format::TraceHeader other = testing::SampleHeader();
  other.gpus[0].name = "NVIDIA H100";
  other.environment.push_back({"CUDA_LAUNCH_BLOCKING", "1"});
  auto report = DiffTraces(Write(dir, "a.ndt", Program()), Write(dir, "b.ndt", Program(), other));
  REQUIRE(report.ok());
  CHECK_FALSE(report->comparable());
  CHECK_FALSE(report->identical());
  REQUIRE(report->header.size() == 2);
  CHECK(report->header[0].blocking);
  CHECK_FALSE(report->header[1].blocking);
  CHECK_THAT(RenderDiffText(*report), Catch::StartsWith("not comparable: gpu 0 name differs"));
}

TEST_CASE("a missing trace is an error naming it", "[replayer]") {
  TempDir dir;
  auto report = DiffTraces(Write(dir, "a.ndt", Program()), dir / "missing.ndt");
  REQUIRE_FALSE(report.ok());
  CHECK_THAT(report.status().message(), Catch::Contains("missing.ndt"));
}

// Compares `text` (with the temporary directory masked) with a golden file, or rewrites it
// when NDT_UPDATE_GOLDEN=1.
void CheckGolden(std::string text, const TempDir& dir, const std::string& name) {
  const std::string prefix = dir.path().string();
  for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.replace(at, prefix.size(), "<dir>");
  const std::string path = std::string(NDT_TEST_DATA_DIR) + "/golden/" + name;
  if (const char* update = std::getenv("NDT_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(path) << text;
  }
  std::ifstream in(path);
  std::stringstream golden;
  golden << in.rdbuf();
  CHECK(text == golden.str());
}

TEST_CASE("the text report of a nondeterministic op matches its golden file", "[replayer]") {
  TempDir dir;
  auto racing = [](uint64_t digest, double sum) {
    return [=](std::vector<OpRecord>& ops) { ops[1].outputs = {Buffer("self", 2, digest, sum)}; };
  };
  const DiffReport report = Diff(dir, Program(racing(7, 3.0)), Program(racing(8, 3.25)));
  CheckGolden(RenderDiffText(report), dir, "diff_nondeterministic_op.txt");
}

TEST_CASE("the text report of a structural difference matches its golden file", "[replayer]") {
  TempDir dir;
  const DiffReport report = Diff(dir, Program(), Program([](auto& ops) {
    ops.erase(ops.begin() + 3);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].sequence = i;
  }));
  CheckGolden(RenderDiffText(report), dir, "diff_structural.txt");
}

TEST_CASE("the text report of every other divergence class matches its golden file",
          "[replayer]") {
  TempDir dir;
  SECTION("rng_state") {
    const DiffReport report =
        Diff(dir, Program(), Program([](auto& ops) { ops[3].rng->offset = 12; }));
    CheckGolden(RenderDiffText(report), dir, "diff_rng_state.txt");
  }
  SECTION("algorithm_selection") {
    const DiffReport report = Diff(dir, Program(), Program([](auto& ops) {
      ops[2].algorithm->id = 5;
      ops[2].algorithm->name = "engine 5";
      ops[2].algorithm->source = format::ChoiceSource::kBenchmark;
      ops[2].outputs[0].digest.hi ^= 4;
      ops[2].outputs[0].summary.sum = 12.75;
    }));
    CheckGolden(RenderDiffText(report), dir, "diff_algorithm_selection.txt");
  }
  SECTION("propagated, from a kernel without an output digest") {
    const DiffReport report =
        Diff(dir, Program(), Program([](auto& ops) { ops[4].outputs[0].digest.lo = 501; }));
    CheckGolden(RenderDiffText(report), dir, "diff_propagated.txt");
  }
  SECTION("uncovered") {
    std::vector<Record> b = Program();
    std::get<format::StateDigestRecord>(b.back()).allocations[1].digest.lo ^= 1;
    CheckGolden(RenderDiffText(Diff(dir, Program(), b)), dir, "diff_uncovered.txt");
  }
  SECTION("nondeterministic_op with its exact size from captured buffers") {
    auto report = DiffTraces(WriteCaptured(dir, "a.ndt", {1, 2}, {1.0f, 2.0f, 3.0f}),
                             WriteCaptured(dir, "b.ndt", {1, 2}, {1.0f, 2.0f, 3.0009766f}));
    REQUIRE(report.ok());
    CheckGolden(RenderDiffText(*report), dir, "diff_exact.txt");
  }
}

TEST_CASE("the JSON report follows the ndtrace.diff/2 schema", "[replayer]") {
  TempDir dir;
  const DiffReport report =
      Diff(dir, Program(), Program([](auto& ops) { ops[3].rng->seed = 43; }));
  const auto j = nlohmann::json::parse(RenderDiffJson(report));
  CHECK(j.at("schema") == "ndtrace.diff/2");
  CHECK(j.at("verdict") == "diverged");
  CHECK(j.at("comparable").is_boolean());
  CHECK(j.at("header_differences").is_array());
  const auto& d = j.at("first_divergence");
  CHECK(d.at("class") == "rng_state");
  for (const char* key : {"sequence", "thread", "stream", "lane_index", "kind", "name"}) {
    CHECK(d.at("op").contains(key));
  }
  CHECK(d.at("op").at("sequence") == 3);
  CHECK(d.at("evidence").is_array());
  CHECK(d.at("hint").at("fix").is_string());
  CHECK(d.at("root").is_null());
  CHECK(d.at("bisect_window").is_null());
  CHECK(d.at("exact").is_null());
  CHECK(j.at("first_structural_difference").is_null());
  for (const char* key :
       {"ops_a", "ops_b", "ops_compared", "divergent_ops", "structural_differences"}) {
    CHECK(j.at("counts").at(key).is_number_unsigned());
  }
  CHECK(j.at("warnings").is_array());
}

TEST_CASE("every kernel-name row of the fix-hint table is reachable", "[replayer]") {
  // One real kernel per hint, as launches report them (tests/unit/fix_hints_test.cc has the
  // full table of names, with the deterministic kernels of the same families).
  const char* names[] = {
      "at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true, "
      "at::native::(anonymous namespace)::ReduceAdd>",
      "at::native::indexFuncSmallIndex<float, long, unsigned int, 1, 1, -2, "
      "at::native::(anonymous namespace)::ReduceMultiply>",
      "at::native::_scatter_gather_elementwise_kernel<128, 4, "
      "at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<"
      "at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd "
      "const&)::{lambda(int)#1}>",
      "at::native::_scatter_gather_elementwise_kernel<128, 4, "
      "at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<"
      "at::native::ReduceMultiply>(at::TensorIterator&, long, long, long, "
      "at::native::ReduceMultiply const&)::{lambda(int)#1}>",
      "at::native::_scatter_gather_elementwise_kernel<128, 4, "
      "at::native::_cuda_scatter_gather_internal_kernel<true, at::native::OpaqueType<4> >::"
      "operator()<at::native::TensorAssign>(at::TensorIterator&, long, long, long, "
      "at::native::TensorAssign const&)::{lambda(int)#1}>",
      "at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
      "at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, "
      "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>",
      "at::native::elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<"
      "at::native::OpaqueType<4> >(at::TensorIterator&, long, long, long)::{lambda(int)#1}>",
      "at::native::index_elementwise_kernel<128, 4, at::native::cuda_take_put_kernel<float, "
      "at::native::put_kernel(at::TensorIterator&, at::TensorBase const&, bool)::"
      "{lambda()#1}>",
      "at::native::(anonymous namespace)::EmbeddingBag_accGradParametersKernel_max<float, long>",
      "at::native::(anonymous namespace)::ctc_loss_backward_collect_nonblank_gpu_kernel<float, "
      "long>",
      "at::native::(anonymous namespace)::atomic_adaptive_average_gradinput<float>",
      "at::native::(anonymous namespace)::atomicadaptivemaxgradinput<float>",
      "at::native::(anonymous namespace)::avg_pool3d_cuda_update_grad_input_atomic<float, "
      "float>",
      "at::native::(anonymous namespace)::max_pool3d_with_indices_backward_single_out_frame<"
      "float>",
      "at::native::(anonymous namespace)::fractional_max_pool2d_backward_out_cuda_frame<float>",
      "at::native::max_unpooling2d_forward_kernel<float>",
      "at::native::(anonymous namespace)::upsample_bilinear2d_backward_out_frame<float, float>",
      "at::native::grid_sampler_2d_backward_kernel<float, int>",
      "at::native::(anonymous namespace)::reflection_pad2d_backward_out_kernel<float>",
      "at::native::(anonymous namespace)::replication_pad_backward_kernel<float>",
      "at::native::(anonymous namespace)::nll_loss2d_forward_kernel<float, float, long>",
      "at::cuda::kernelHistogram1D<float, float, long, 1, 2, -1, "
      "(at::cuda::CUDAHistogramMemoryType)0, at::cuda::CUDA_tensor_histogram<float, float, "
      "false>(at::Tensor, at::Tensor, at::Tensor, long, float, float, at::TensorArgType, "
      "at::TensorArgType, at::TensorArgType)::{lambda(long)#2}>",
      "at::cuda::kernelHistogram1D<float, long, long, 1, 2, -1, "
      "(at::cuda::CUDAHistogramMemoryType)0, at::cuda::CUDA_tensor_histogram<float, long, "
      "true>(at::Tensor, at::Tensor, at::Tensor, long, long, long, at::TensorArgType, "
      "at::TensorArgType, at::TensorArgType)::{lambda(long)#1}>",
      "at::native::(anonymous namespace)::gatherMedian<float, unsigned int, 2>",
      "at::native::(anonymous namespace)::gatherKthValue<float, unsigned int, 2>",
      "at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::DeviceScanPolicy<float, "
      "std::plus<float> >::Policy900, float const*, float*, "
      "at_cuda_detail::cub::ScanTileState<float, true>, std::plus<float>, "
      "at_cuda_detail::cub::NullType, int, float>",
      "pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<"
      "pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, "
      "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, "
      "cutlass::bfloat16_t> >, false, true, false, false, false, true, false>",
      "fmha_cutlassB_f16_aligned_64x64_k64_sm80"};
  std::set<std::string> distinct;
  for (const char* name : names) {
    OpRecord op;
    op.kind = OpKind::kKernelLaunch;
    op.name = std::string("void ") + name + "(...)";
    const auto hint = FindFixHint(op, DivergenceClass::kNondeterministicOp);
    REQUIRE(hint.has_value());
    CHECK_THAT(hint->framework_op, !Catch::Contains("not in ndtrace's table"));
    CHECK_THAT(hint->framework_op, !Catch::Contains("not a suspect"));
    distinct.insert(hint->framework_op);
  }
  CHECK(distinct.size() == KernelHintCount());
}

}  // namespace
}  // namespace ndt::replay
