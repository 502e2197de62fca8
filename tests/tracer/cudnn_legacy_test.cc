// cuDNN's legacy convolution API under the tracer, end to end on the stand-in device with
// tests/programs/conv_legacy: what a convolution op records, the nondeterminism of
// BWD_FILTER_ALGO_0 and its removal by --deterministic, benchmark selection and --pin, choices
// that cannot be applied, and `ndtrace check` on all of it. Stand-in results only.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
using ndt::format::AlgorithmChoice;
using ndt::format::BufferDigest;
using ndt::format::ChoiceSource;
using ndt::format::Determinism;
using ndt::format::OpKind;
using ndt::format::PolicyDecisionRecord;

const std::string kNdtrace = "'" NDTRACE_BIN "'";
const std::string kConv = "'" PROG_CONV_LEGACY "'";

// `ndtrace record [options] -o trace -- conv_legacy args`.
RunResult RecordConv(const std::string& trace, const std::string& args,
                     const std::string& options = "") {
  std::remove(trace.c_str());
  return Run(kNdtrace + " record " + options + " -o '" + trace + "' -- " + kConv + " " + args);
}

std::vector<OpRecord> Convolutions(const std::vector<Record>& records) {
  std::vector<OpRecord> convs;
  for (const OpRecord& op : Ops(records)) {
    if (op.kind == OpKind::kCudnnConvolution) convs.push_back(op);
  }
  return convs;
}

const OpRecord* Named(const std::vector<OpRecord>& ops, const std::string& name) {
  for (const OpRecord& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

std::string Text(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* text = std::get_if<std::string>(&argument.value)) return *text;
  }
  return "";
}

const BufferDigest* Digest(const std::vector<BufferDigest>& digests, const std::string& role) {
  for (const BufferDigest& digest : digests) {
    if (digest.role == role) return &digest;
  }
  return nullptr;
}

// The decisions about cuDNN choices (the policy's environment settings are left out).
std::vector<PolicyDecisionRecord> Decisions(const std::vector<Record>& records) {
  std::vector<PolicyDecisionRecord> decisions;
  for (const Record& record : records) {
    const auto* decision = std::get_if<PolicyDecisionRecord>(&record);
    if (decision != nullptr && decision->library == "cudnn") decisions.push_back(*decision);
  }
  return decisions;
}

// The algorithm ids of the first forward, backward-data and backward-filter calls.
std::tuple<int64_t, int64_t, int64_t> Algorithms(const std::vector<OpRecord>& convs) {
  const auto id = [&](const char* name) -> int64_t {
    const OpRecord* op = Named(convs, name);
    return op != nullptr && op->algorithm ? op->algorithm->id : -1;
  };
  return {id("cudnnConvolutionForward"), id("cudnnConvolutionBackwardData"),
          id("cudnnConvolutionBackwardFilter")};
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

// Shapes of conv_legacy: x 4x3x16x16, w 8x3x3x3, y 4x8x16x16 stored with rows of 17 floats.
constexpr uint64_t kXBytes = 4 * 3 * 16 * 16 * 4;
constexpr uint64_t kWBytes = 8 * 3 * 3 * 3 * 4;
constexpr uint64_t kYBytes = (3 * 2176 + 7 * 272 + 15 * 17 + 15 + 1) * 4;  // exact, no last pad

}  // namespace

TEST_CASE("the stand-in cuDNN's three directions are adjoint with every algorithm",
          "[tracer][cudnn]") {
  // <conv(x, w), dy> = <x, dx> = <w, dw>: conv_legacy prints the three; they must agree up to
  // float rounding whichever algorithms ran (fixed, benchmark, heuristic).
  const std::vector<std::string> modes = {"--algo 0",    "--algo 1",  "--algo 2",
                                          "--algo 3",    "--algo 5",  "--algo 6",
                                          "--benchmark", "--find-ex", "--heuristic 2"};
  for (const std::string& mode : modes) {
    INFO(mode);
    const RunResult run = Run(kConv + " " + mode);
    INFO(run.err);
    REQUIRE(run.status == 0);
    double y_dy = 0, x_dx = 0, w_dw = 0;
    const size_t at = run.out.find("adjoint ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(run.out.c_str() + at, "adjoint %lf %lf %lf", &y_dy, &x_dx, &w_dw) == 3);
    CHECK(std::abs(y_dy) > 1.0);
    CHECK(x_dx == Approx(y_dy).epsilon(1e-4));
    CHECK(w_dw == Approx(y_dy).epsilon(1e-4));
  }
  // Like real cuDNN, BWD_FILTER_ALGO_WINOGRAD is never supported.
  const RunResult winograd = Run(kConv + " --algo 4");
  CHECK(winograd.status == 1);
  CHECK(winograd.err.find("CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos);
}

TEST_CASE(
    "a cuDNN convolution records its problem and algorithm with a fingerprint and exact extents",
    "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "observe.ndt").string();
  const RunResult run = RecordConv(trace, "");
  INFO(run.err);
  REQUIRE(run.status == 0);
  REQUIRE(run.out.find("checksum ") != std::string::npos);
  const std::vector<OpRecord> convs = Convolutions(ReadAll(trace));
  REQUIRE(convs.size() == 3);

  const OpRecord* forward = Named(convs, "cudnnConvolutionForward");
  const OpRecord* data = Named(convs, "cudnnConvolutionBackwardData");
  const OpRecord* filter = Named(convs, "cudnnConvolutionBackwardFilter");
  REQUIRE(forward != nullptr);
  REQUIRE(data != nullptr);
  REQUIRE(filter != nullptr);

  REQUIRE(filter->algorithm);
  CHECK(filter->algorithm->library == "cudnn");
  CHECK(filter->algorithm->id == 0);
  CHECK(filter->algorithm->name == "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0");
  CHECK(filter->algorithm->determinism == Determinism::kNondeterministic);
  CHECK(filter->algorithm->source == ChoiceSource::kRequested);
  REQUIRE(forward->algorithm);
  CHECK(forward->algorithm->name == "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM");
  CHECK(forward->algorithm->determinism == Determinism::kDeterministic);
  REQUIRE(data->algorithm);
  CHECK(data->algorithm->name == "CUDNN_CONVOLUTION_BWD_DATA_ALGO_1");

  // The fingerprint names the problem, never a pointer; each direction has its own.
  const std::string fingerprint = Text(*filter, "fingerprint");
  CHECK(fingerprint.rfind("cudnn conv2d bwd-filter x=4x3x16x16/768,256,16,1 f32", 0) == 0);
  CHECK(fingerprint.find("y=4x8x16x16/2176,272,17,1") != std::string::npos);
  CHECK(fingerprint.find("pad=1,1 stride=1,1 dilation=1,1 mode=cross_correlation") !=
        std::string::npos);
  CHECK(fingerprint.find("0x") == std::string::npos);
  CHECK(Text(*forward, "fingerprint").rfind("cudnn conv2d forward ", 0) == 0);

  // Digests of exactly what each call reads and writes, under the directions' role names.
  const auto check = [](const std::vector<BufferDigest>& digests, const std::string& role,
                        uint64_t bytes) {
    INFO(role);
    const BufferDigest* digest = Digest(digests, role);
    REQUIRE(digest != nullptr);
    CHECK(digest->bytes == bytes);
    CHECK(digest->dtype == ndt::format::DType::kF32);
    CHECK(digest->pointer.allocation_id != 0);
  };
  CHECK(forward->inputs.size() == 2);
  check(forward->inputs, "x", kXBytes);
  check(forward->inputs, "w", kWBytes);
  check(forward->outputs, "y", kYBytes);
  check(data->inputs, "dy", kYBytes);
  check(data->inputs, "w", kWBytes);
  check(data->outputs, "dx", kXBytes);
  CHECK(filter->inputs.size() == 2);  // beta == 0 in the first iteration: dw is not read
  check(filter->inputs, "x", kXBytes);
  check(filter->inputs, "dy", kYBytes);
  check(filter->outputs, "dw", kWBytes);
  // y and dy are different buffers of the same shape.
  CHECK(Digest(forward->outputs, "y")->pointer.allocation_id !=
        Digest(data->inputs, "dy")->pointer.allocation_id);
}

TEST_CASE("cuDNN's nondeterministic bwd-filter algorithm diverges and --deterministic replaces it",
          "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  // Without a policy: dw differs between runs from identical inputs (racing atomics).
  std::set<std::pair<uint64_t, uint64_t>> observed;
  std::set<std::pair<uint64_t, uint64_t>> inputs;
  for (int i = 0; i < 4 && observed.size() < 2; ++i) {
    const std::string trace = (dir / ("observe" + std::to_string(i) + ".ndt")).string();
    const RunResult run = RecordConv(trace, "");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const std::vector<OpRecord> convs = Convolutions(ReadAll(trace));
    const OpRecord* filter = Named(convs, "cudnnConvolutionBackwardFilter");
    REQUIRE(filter != nullptr);
    REQUIRE(Digest(filter->outputs, "dw") != nullptr);
    const auto& out = Digest(filter->outputs, "dw")->digest;
    REQUIRE(Digest(filter->inputs, "x") != nullptr);
    const auto& in = Digest(filter->inputs, "x")->digest;
    observed.insert({out.lo, out.hi});
    inputs.insert({in.lo, in.hi});
  }
  CHECK(inputs.size() == 1);
  CHECK(observed.size() == 2);

  // --deterministic: the same two runs give bit-identical dw, and say what was replaced.
  std::vector<std::vector<ndt::format::Digest>> enforced;  // per run, dw of each call
  std::string first_trace;
  for (int i = 0; i < 2; ++i) {
    const std::string trace = (dir / ("det" + std::to_string(i) + ".ndt")).string();
    if (first_trace.empty()) first_trace = trace;
    const RunResult run = RecordConv(trace, "2", "--deterministic");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> convs = Convolutions(records);
    REQUIRE(convs.size() == 6);
    enforced.emplace_back();
    for (const OpRecord& op : convs) {
      if (op.name != "cudnnConvolutionBackwardFilter") continue;
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->id == 1);
      CHECK(op.algorithm->determinism == Determinism::kDeterministic);
      CHECK(op.algorithm->source == ChoiceSource::kEnforced);
      REQUIRE(Digest(op.outputs, "dw") != nullptr);
      enforced.back().push_back(Digest(op.outputs, "dw")->digest);
    }
    const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
    REQUIRE(decisions.size() == 2);  // one per backward-filter call
    for (const PolicyDecisionRecord& decision : decisions) {
      CHECK(decision.library == "cudnn");
      CHECK(decision.applied);
      CHECK(decision.action ==
            "replaced bwd-filter algo 0 (nondeterministic) by 1 "
            "(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1)");
      REQUIRE(decision.from_choice);
      CHECK(decision.from_choice->id == 0);
      REQUIRE(decision.to_choice);
      CHECK(decision.to_choice->id == 1);
    }
  }
  REQUIRE(enforced.size() == 2);
  CHECK(enforced[0].size() == 2);
  CHECK(enforced[0] == enforced[1]);
  CHECK_FALSE(enforced[0][0] == enforced[0][1]);  // the second call accumulated (beta = 1)

  const RunResult show = Run(kNdtrace + " show '" + first_trace + "'");
  REQUIRE(show.status == 0);
  CHECK(Count(show.out, "replaced bwd-filter algo 0 (nondeterministic) by 1") == 2);
}

int64_t Signed(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* value = std::get_if<int64_t>(&argument.value)) return *value;
  }
  return -1;
}

TEST_CASE("the deterministic policy filters nondeterministic Get_v7 and FindEx results",
          "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  // Heuristics list the nondeterministic bwd-filter ALGO_0 first: the program takes it.
  const std::string observed = (dir / "heuristic.ndt").string();
  REQUIRE(RecordConv(observed, "--heuristic").status == 0);
  {
    const std::vector<OpRecord> convs = Convolutions(ReadAll(observed));
    const OpRecord* filter = Named(convs, "cudnnConvolutionBackwardFilter");
    REQUIRE(filter != nullptr);
    CHECK(filter->algorithm->id == 0);
    CHECK(filter->algorithm->source == ChoiceSource::kHeuristic);
  }

  // Enforced, the list the program reads has lost ALGO_0 and ALGO_3, so it picks a
  // deterministic algorithm itself and the convolution call needs no replacement.
  const std::string trace = (dir / "heuristic_det.ndt").string();
  const RunResult run = RecordConv(trace, "--heuristic", "--deterministic");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const std::vector<Record> records = ReadAll(trace);
  const std::vector<OpRecord> ops = Ops(records);
  const OpRecord* query = Named(ops, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  REQUIRE(query != nullptr);
  CHECK(Signed(*query, "requested_count") == 7);
  CHECK(Signed(*query, "returned_count") == 5);
  CHECK(Text(*query, "algorithms").find("nondeterministic") == std::string::npos);
  CHECK(Text(*query, "first") == "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1");
  const OpRecord* filter = Named(ops, "cudnnConvolutionBackwardFilter");
  REQUIRE(filter != nullptr);
  CHECK(filter->algorithm->id == 1);
  CHECK(filter->algorithm->source == ChoiceSource::kHeuristic);
  std::vector<std::string> actions;
  for (const PolicyDecisionRecord& decision : Decisions(records)) {
    CHECK(decision.applied);
    actions.push_back(decision.action);
  }
  CHECK(actions ==
        std::vector<std::string>{"removed nondeterministic bwd-data algo 0 from the "
                                 "cudnnGetConvolutionBackwardDataAlgorithm_v7 results",
                                 "removed nondeterministic bwd-filter algo 0, 3 from the "
                                 "cudnnGetConvolutionBackwardFilterAlgorithm_v7 results"});

  // The same through cudnnFind*AlgorithmEx on the program's buffers (PyTorch's benchmark).
  for (int i = 0; i < 3; ++i) {
    const std::string found = (dir / ("find_ex" + std::to_string(i) + ".ndt")).string();
    const RunResult bench = RecordConv(found, "--find-ex", "--deterministic");
    INFO(bench.err);
    REQUIRE(bench.status == 0);
    const std::vector<Record> found_records = ReadAll(found);
    for (const OpRecord& op : Convolutions(found_records)) {
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->determinism == Determinism::kDeterministic);
      CHECK(op.algorithm->source == ChoiceSource::kBenchmark);
    }
    size_t removed = 0;
    for (const PolicyDecisionRecord& decision : Decisions(found_records)) {
      removed += decision.action.rfind("removed nondeterministic", 0) == 0 &&
                 decision.action.find("AlgorithmEx results") != std::string::npos;
    }
    CHECK(removed == 2);  // backward data and backward filter
  }
}

TEST_CASE("benchmark-chosen cuDNN algorithms vary between runs and --pin reproduces them",
          "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  std::set<std::tuple<int64_t, int64_t, int64_t>> chosen;
  const std::string reference = (dir / "bench0.ndt").string();
  for (int i = 0; i < 6 && chosen.size() < 2; ++i) {
    const std::string trace = (dir / ("bench" + std::to_string(i) + ".ndt")).string();
    const RunResult run = RecordConv(trace, "--benchmark");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> convs = Convolutions(records);
    REQUIRE(convs.size() == 3);
    for (const OpRecord& op : convs) {
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->source == ChoiceSource::kBenchmark);
    }
    // The Find ops carry the fingerprint of the call they chose for and what came first.
    const std::vector<OpRecord> ops = Ops(records);
    const OpRecord* find = Named(ops, "cudnnFindConvolutionBackwardFilterAlgorithm");
    REQUIRE(find != nullptr);
    const OpRecord* filter = Named(convs, "cudnnConvolutionBackwardFilter");
    CHECK(Text(*find, "fingerprint") == Text(*filter, "fingerprint"));
    CHECK(Text(*find, "first") == filter->algorithm->name);
    chosen.insert(Algorithms(convs));
  }
  CHECK(chosen.size() == 2);  // the program's own selection varies run to run

  const auto recorded = Algorithms(Convolutions(ReadAll(reference)));
  for (int i = 0; i < 3; ++i) {
    const std::string trace = (dir / ("pinned" + std::to_string(i) + ".ndt")).string();
    const RunResult run = RecordConv(trace, "--benchmark", "--pin '" + reference + "'");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> convs = Convolutions(records);
    CHECK(Algorithms(convs) == recorded);
    for (const OpRecord& op : convs) {
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->source == ChoiceSource::kPinned);
    }
    for (const PolicyDecisionRecord& decision : Decisions(records)) CHECK(decision.applied);
    CHECK(run.err.find("cannot pin") == std::string::npos);
  }
}

TEST_CASE("the deterministic policy ranks Find results by cuDNN's heuristic so that benchmark "
          "picks the same algorithms and outputs in every run",
          "[tracer][cudnn]") {
  // Without the policy the picks vary (the test above); the deterministic ones alone would
  // still differ from one another, so the policy must also take timing out of the ranking.
  ndt::testing::TempDir dir;
  std::set<std::tuple<int64_t, int64_t, int64_t>> chosen;
  std::set<std::string> outputs;
  for (int i = 0; i < 4; ++i) {
    const std::string trace = (dir / ("det" + std::to_string(i) + ".ndt")).string();
    const RunResult run = RecordConv(trace, "--benchmark", "--deterministic");
    INFO(run.err);
    REQUIRE(run.status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> convs = Convolutions(records);
    REQUIRE(convs.size() == 3);
    chosen.insert(Algorithms(convs));
    std::string digests;
    for (const OpRecord& op : convs) {
      for (const BufferDigest& out : op.outputs) digests += std::to_string(out.digest.lo) + " ";
    }
    outputs.insert(digests);
    size_t ranked = 0;
    for (const PolicyDecisionRecord& decision : Decisions(records)) {
      ranked += decision.action.rfind("ranked the cudnnFind", 0) == 0;
    }
    CHECK(ranked == 3);  // one per direction
  }
  CHECK(chosen.size() == 1);
  CHECK(outputs.size() == 1);
}

TEST_CASE("pinning a reference that ran a nondeterministic algorithm says its results can still "
          "differ",
          "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "ref.ndt").string();
  REQUIRE(RecordConv(reference, "").status == 0);  // backward filter: ALGO_0, nondeterministic
  const RunResult pinned =
      RecordConv((dir / "pinned.ndt").string(), "", "--pin '" + reference + "'");
  INFO(pinned.err);
  CHECK(pinned.status == 0);
  CHECK(Count(pinned.err, "ran nondeterministic algorithms (cudnn "
                          "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0)") == 1);
  // A reference recorded under --deterministic pins deterministic algorithms: nothing to say.
  const std::string deterministic = (dir / "det.ndt").string();
  REQUIRE(RecordConv(deterministic, "", "--deterministic").status == 0);
  const RunResult quiet =
      RecordConv((dir / "quiet.ndt").string(), "", "--pin '" + deterministic + "'");
  CHECK(quiet.status == 0);
  CHECK(quiet.err.find("nondeterministic algorithms") == std::string::npos);
}

TEST_CASE("a cuDNN choice that cannot be applied is said once and the program completes",
          "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  const std::string recorded = (dir / "recorded.ndt").string();
  REQUIRE(RecordConv(recorded, "--benchmark").status == 0);

  SECTION("a pin trace recorded with another cuDNN version") {
    const std::string other = (dir / "other_cudnn.ndt").string();
    {
      auto reader = ndt::format::TraceReader::Open(recorded);
      REQUIRE(reader.ok());
      ndt::format::TraceHeader header = (*reader)->header();
      REQUIRE(header.versions.cudnn != 0);
      header.versions.cudnn -= 100;  // one minor version older
      auto writer = ndt::format::TraceWriter::Create(other, header);
      REQUIRE(writer.ok());
      Record record;
      while ((*reader)->Next(&record)) REQUIRE((*writer)->Append(record));
      REQUIRE((*writer)->Close().ok());
    }
    const std::string trace = (dir / "pinned.ndt").string();
    const RunResult run = RecordConv(trace, "--benchmark 3", "--pin '" + other + "'");
    INFO(run.err);
    CHECK(run.status == 0);
    CHECK(run.out.find("checksum ") != std::string::npos);
    CHECK(Count(run.err, "cannot pin cuDNN algorithms: the reference used cuDNN") == 1);
    const std::vector<PolicyDecisionRecord> decisions = Decisions(ReadAll(trace));
    REQUIRE(decisions.size() >= 9);  // 3 Finds and 3 x 3 convolutions each tried to pin
    for (const PolicyDecisionRecord& decision : decisions) CHECK_FALSE(decision.applied);
  }

  SECTION("--deterministic with a workspace no deterministic bwd-filter algorithm fits") {
    const std::string trace = (dir / "small.ndt").string();
    const RunResult run = RecordConv(trace, "--workspace 20000 3", "--deterministic");
    INFO(run.err);
    CHECK(run.status == 0);
    CHECK(Count(run.err, "cannot replace bwd-filter algo 0") == 1);
    const std::vector<Record> records = ReadAll(trace);
    for (const OpRecord& op : Convolutions(records)) {
      if (op.name == "cudnnConvolutionBackwardFilter") CHECK(op.algorithm->id == 0);
    }
    const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
    REQUIRE(decisions.size() == 3);
    for (const PolicyDecisionRecord& decision : decisions) CHECK_FALSE(decision.applied);
  }
}

TEST_CASE("ndtrace check names cuDNN's nondeterministic algorithm and benchmark selection",
          "[tracer][cudnn]") {
  ndt::testing::TempDir dir;
  const std::string out = (dir / "runs").string();

  const RunResult plain = Run(kNdtrace + " check -n 2 -o '" + out + "1' -- " + kConv);
  INFO(plain.out << plain.err);
  CHECK(plain.status == 1);
  CHECK(plain.out.find("error[nondeterministic_op]") != std::string::npos);
  CHECK(plain.out.find("cudnnConvolutionBackwardFilter") != std::string::npos);
  CHECK(plain.out.find("CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0") != std::string::npos);

  const RunResult benchmark =
      Run(kNdtrace + " check -n 4 -o '" + out + "2' -- " + kConv + " --benchmark");
  INFO(benchmark.out << benchmark.err);
  CHECK(benchmark.status == 1);
  CHECK(benchmark.out.find("error[algorithm_selection]") != std::string::npos);

  const RunResult deterministic =
      Run(kNdtrace + " check --deterministic -n 2 -o '" + out + "3' -- " + kConv + " 2");
  INFO(deterministic.out << deterministic.err);
  CHECK(deterministic.status == 0);
}

TEST_CASE(
    "cuDNN's tensor operations are recorded with exact tensors, and --deterministic makes "
    "max pooling backward deterministic",
    "[tracer][cudnn]") {
  // corpus/cudnn_cnn: conv, bias (cudnnAddTensor), ReLU, 3x3 max pooling with stride 1, a
  // cuBLAS layer, softmax; their backward passes; --plant pools with CUDNN_POOLING_MAX.
  ndt::testing::TempDir dir;
  const auto record = [&](const std::string& name, const std::string& options,
                          const std::string& args) {
    const std::string trace = (dir / name).string();
    const RunResult run = Run(kNdtrace + " record " + options + " -o '" + trace + "' -- '" +
                              CORPUS_CUDNN_CNN "' " + args);
    INFO(run.err);
    REQUIRE(run.status == 0);
    return ReadAll(trace);
  };
  constexpr uint64_t kMap = 8 * 4 * 12 * 12 * 4;  // N x K x H x W floats: conv, ReLU, pooled
  const std::vector<OpRecord> ops = Ops(record("plain.ndt", "", ""));
  const OpRecord* bias = Named(ops, "cudnnAddTensor");
  REQUIRE(bias != nullptr);
  REQUIRE(Digest(bias->inputs, "A") != nullptr);
  CHECK(Digest(bias->inputs, "A")->bytes == 16);
  REQUIRE(Digest(bias->inputs, "C") != nullptr);  // beta = 1: C is read too
  CHECK(Digest(bias->outputs, "C")->bytes == kMap);
  const OpRecord* relu = Named(ops, "cudnnActivationForward");
  REQUIRE(relu != nullptr);
  CHECK(Text(*relu, "mode") == "CUDNN_ACTIVATION_RELU");
  CHECK(relu->inputs.size() == 1);  // beta = 0: y is not read
  CHECK(Digest(relu->outputs, "y")->bytes == kMap);
  const OpRecord* pool = Named(ops, "cudnnPoolingForward");
  REQUIRE(pool != nullptr);
  CHECK(Text(*pool, "mode") == "CUDNN_POOLING_MAX_DETERMINISTIC");
  CHECK_FALSE(pool->algorithm);
  const OpRecord* softmax = Named(ops, "cudnnSoftmaxForward");
  REQUIRE(softmax != nullptr);
  CHECK(Text(*softmax, "algo") == "CUDNN_SOFTMAX_ACCURATE");
  CHECK(Digest(softmax->outputs, "y")->bytes == 8 * 10 * 4);
  const OpRecord* back = Named(ops, "cudnnPoolingBackward");
  REQUIRE(back != nullptr);
  for (const char* role : {"y", "dy", "x"}) {
    INFO(role);
    REQUIRE(Digest(back->inputs, role) != nullptr);
    CHECK(Digest(back->inputs, role)->bytes == kMap);
  }
  CHECK(Digest(back->outputs, "dx")->bytes == kMap);
  REQUIRE(back->algorithm);
  CHECK(back->algorithm->name == "CUDNN_POOLING_MAX_DETERMINISTIC");
  CHECK(back->algorithm->determinism == Determinism::kDeterministic);
  REQUIRE(Named(ops, "cudnnActivationBackward") != nullptr);
  REQUIRE(Named(ops, "cudnnConvolutionBackwardFilter") != nullptr);
  // Batch norm (the Ex forms PyTorch calls): the running averages are read and written (factor
  // 0.1 updates them in place), the statistics saved for backward only written.
  const OpRecord* bn = Named(ops, "cudnnBatchNormalizationForwardTrainingEx");
  REQUIRE(bn != nullptr);
  CHECK(Text(*bn, "mode") == "CUDNN_BATCHNORM_SPATIAL");
  for (const char* role : {"x", "bnScale", "bnBias", "runningMean", "runningVariance"}) {
    INFO(role);
    REQUIRE(Digest(bn->inputs, role) != nullptr);
    CHECK(Digest(bn->inputs, role)->bytes == (role[0] == 'x' ? kMap : 16));
  }
  CHECK(bn->inputs.size() == 5);  // beta = 0: y is not read; the saved statistics are not
  for (const char* role : {"y", "runningMean", "runningVariance", "saveMean", "saveInvVariance"}) {
    INFO(role);
    REQUIRE(Digest(bn->outputs, role) != nullptr);
  }
  CHECK(Digest(bn->outputs, "y")->bytes == kMap);
  const OpRecord* bn_back = Named(ops, "cudnnBatchNormalizationBackwardEx");
  REQUIRE(bn_back != nullptr);
  for (const char* role : {"x", "dy", "bnScale", "savedMean", "savedInvVariance"}) {
    INFO(role);
    REQUIRE(Digest(bn_back->inputs, role) != nullptr);
  }
  for (const char* role : {"dx", "dBnScale", "dBnBias"}) {
    INFO(role);
    REQUIRE(Digest(bn_back->outputs, role) != nullptr);
  }
  CHECK(Digest(bn_back->outputs, "dBnBias")->bytes == 16);

  // --plant under --deterministic: every backward call runs the deterministic mode, two runs
  // give the same gradients, and the trace says what was replaced.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> gradients;
  for (int i = 0; i < 2; ++i) {
    const std::vector<Record> records =
        record("det" + std::to_string(i) + ".ndt", "--deterministic", "--plant");
    gradients.emplace_back();
    for (const OpRecord& op : Ops(records)) {
      if (op.name != "cudnnPoolingBackward") continue;
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->name == "CUDNN_POOLING_MAX_DETERMINISTIC");
      CHECK(op.algorithm->source == ChoiceSource::kEnforced);
      CHECK(Text(op, "mode") == "CUDNN_POOLING_MAX");  // what the program asked for
      gradients.back().emplace_back(Digest(op.outputs, "dx")->digest.lo,
                                    Digest(op.outputs, "dx")->digest.hi);
    }
    const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
    CHECK(decisions.size() == gradients.back().size());
    for (const PolicyDecisionRecord& decision : decisions) {
      CHECK(decision.applied);
      CHECK(decision.action ==
            "replaced pooling mode CUDNN_POOLING_MAX (nondeterministic) by "
            "CUDNN_POOLING_MAX_DETERMINISTIC in cudnnPoolingBackward");
    }
  }
  CHECK(gradients[0].size() == 4);  // one backward call per step
  CHECK(gradients[0] == gradients[1]);
}
