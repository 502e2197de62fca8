// The cuBLAS and cuBLASLt layer of the tracer, end to end on the stand-in device: the program
// tests/programs/gemm.cc under `ndtrace record`/`check`, with the stand-in libcublas.so.13 and
// libcublasLt.so.13 (tests/standin/). Results here are the stand-in's, never a GPU's.
#include <catch2/catch.hpp>
#include <cstdio>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

using ndt::format::AlgorithmChoice;
using ndt::format::Argument;
using ndt::format::BufferDigest;
using ndt::format::ChoiceSource;
using ndt::format::Determinism;
using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::format::PolicyDecisionRecord;
using ndt::format::Record;

// Records `gemm ARGS` into `trace` with the extra `options` of `ndtrace record`.
RunResult RecordGemm(const std::string& trace, const std::string& args,
                     const std::string& options = "") {
  std::remove(trace.c_str());
  return Run(std::string("'" NDTRACE_BIN "' record ") + options + " -o '" + trace +
             "' -- '" PROG_GEMM "' " + args);
}

std::vector<OpRecord> Named(const std::vector<OpRecord>& ops, const std::string& name) {
  std::vector<OpRecord> named;
  for (const OpRecord& op : ops) {
    if (op.name == name) named.push_back(op);
  }
  return named;
}

std::vector<PolicyDecisionRecord> Decisions(const std::vector<Record>& records) {
  std::vector<PolicyDecisionRecord> decisions;
  for (const Record& record : records) {
    if (const auto* decision = std::get_if<PolicyDecisionRecord>(&record)) {
      if (decision->library == "cublas" || decision->library == "cublasLt") {
        decisions.push_back(*decision);
      }
    }
  }
  return decisions;
}

const Argument* Arg(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

std::string TextArg(const OpRecord& op, const std::string& name) {
  const Argument* argument = Arg(op, name);
  REQUIRE(argument != nullptr);
  REQUIRE(std::holds_alternative<std::string>(argument->value));
  return std::get<std::string>(argument->value);
}

const BufferDigest& Digest(const std::vector<BufferDigest>& digests, const std::string& role) {
  for (const BufferDigest& digest : digests) {
    if (digest.role == role) return digest;
  }
  FAIL("no digest with role " << role);
  static BufferDigest none;
  return none;
}

std::pair<uint64_t, uint64_t> Value(const BufferDigest& digest) {
  return {digest.digest.lo, digest.digest.hi};
}

int CountLines(const std::string& text, const std::string& needle) {
  int count = 0;
  for (const std::string& line : Lines(text)) count += line.find(needle) != std::string::npos;
  return count;
}

constexpr uint64_t kMatrixBytes = 32 * 1024 * 4;  // A (32 x 1024) and B (1024 x 32), f32
constexpr uint64_t kResultBytes = 32 * 32 * 4;

}  // namespace

TEST_CASE("cublas: observe records the handle setup and both GEMMs with exact-extent digests",
          "[tracer][cublas]") {
  const RunResult plain = Run("'" PROG_GEMM "'");
  REQUIRE(plain.status == 0);
  const std::string trace = TempPath("gemm.ndt");
  const RunResult traced = RecordGemm(trace, "");
  REQUIRE(traced.status == 0);
  CHECK(traced.out == plain.out);

  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  const std::vector<OpRecord> create = Named(ops, "cublasCreate_v2");
  const std::vector<OpRecord> set_stream = Named(ops, "cublasSetStream_v2");
  const std::vector<OpRecord> math = Named(ops, "cublasSetMathMode");
  const std::vector<OpRecord> sgemm = Named(ops, "cublasSgemm_v2");
  const std::vector<OpRecord> gemm_ex = Named(ops, "cublasGemmEx");
  REQUIRE(create.size() == 1);
  REQUIRE(set_stream.size() == 1);
  REQUIRE(math.size() == 1);
  REQUIRE(sgemm.size() == 1);
  REQUIRE(gemm_ex.size() == 1);
  CHECK(Named(ops, "cublasDestroy_v2").size() == 1);
  CHECK(create[0].sequence < set_stream[0].sequence);
  CHECK(std::get<uint64_t>(Arg(create[0], "handle")->value) == 1);
  // The stream the handle was given is the one its GEMMs are recorded on.
  CHECK(std::get<uint64_t>(Arg(set_stream[0], "stream")->value) == set_stream[0].stream_id);
  CHECK(set_stream[0].stream_id != 0);
  CHECK(sgemm[0].stream_id == set_stream[0].stream_id);

  const OpRecord& s = sgemm[0];
  CHECK(s.kind == OpKind::kCublasGemm);
  CHECK(std::get<int64_t>(Arg(s, "m")->value) == 32);
  CHECK(std::get<int64_t>(Arg(s, "k")->value) == 1024);
  CHECK(std::get<int64_t>(Arg(s, "ldb")->value) == 1024);
  CHECK(std::get<double>(Arg(s, "beta")->value) == 0.0);
  CHECK(TextArg(s, "fingerprint").find("m=32 n=32 k=1024") != std::string::npos);
  CHECK(TextArg(s, "fingerprint").find("0x") == std::string::npos);
  REQUIRE(s.algorithm.has_value());
  CHECK(s.algorithm->library == "cublas");
  CHECK(s.algorithm->id == -1);
  CHECK(s.algorithm->determinism == Determinism::kDeterministic);
  // beta = 0: C is not read, so only A and B are inputs.
  REQUIRE(s.inputs.size() == 2);
  CHECK(Digest(s.inputs, "A").bytes == kMatrixBytes);
  CHECK(Digest(s.inputs, "B").bytes == kMatrixBytes);
  CHECK(Digest(s.inputs, "A").dtype == ndt::format::DType::kF32);
  REQUIRE(s.outputs.size() == 1);
  CHECK(Digest(s.outputs, "C").bytes == kResultBytes);

  const OpRecord& e = gemm_ex[0];
  CHECK(std::get<int64_t>(Arg(e, "algo")->value) == -1);  // CUBLAS_GEMM_DEFAULT
  REQUIRE(e.inputs.size() == 3);
  // GemmEx reads the C Sgemm wrote (beta = 1).
  CHECK(Value(Digest(e.inputs, "C")) == Value(Digest(s.outputs, "C")));
  // The A and B it read are the bytes copied in.
  const auto copy_in = std::find_if(ops.begin(), ops.end(), [](const OpRecord& op) {
    return op.kind == ndt::format::OpKind::kMemcpy && !op.inputs.empty();
  });
  REQUIRE(copy_in != ops.end());
  CHECK(Value(Digest(e.inputs, "A")) == Value(copy_in->inputs.at(0)));
  REQUIRE(e.outputs.size() == 1);
  // Its output is what the program copied back.
  bool copied_back = false;
  for (const OpRecord& op : ops) {
    for (const BufferDigest& digest : op.outputs) {
      if (digest.role.rfind("dst of op", 0) == 0) {
        copied_back = Value(digest) == Value(e.outputs[0]);
      }
    }
  }
  CHECK(copied_back);
  std::remove(trace.c_str());
}

TEST_CASE("cublas: observe records the cuBLASLt heuristic's algos and the 64-byte algo run",
          "[tracer][cublas]") {
  const std::string trace = TempPath("gemm_lt.ndt");
  REQUIRE(RecordGemm(trace, "--lt").status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  const std::vector<OpRecord> heuristic = Named(ops, "cublasLtMatmulAlgoGetHeuristic");
  const std::vector<OpRecord> matmul = Named(ops, "cublasLtMatmul");
  REQUIRE(heuristic.size() == 1);
  REQUIRE(matmul.size() == 1);
  const Argument* first = Arg(heuristic[0], "algo0");
  REQUIRE(first != nullptr);
  REQUIRE(std::holds_alternative<Argument::Bytes>(first->value));
  CHECK(std::get<Argument::Bytes>(first->value).data.size() == 64);
  CHECK(std::get<int64_t>(Arg(heuristic[0], "returned")->value) >= 2);

  const OpRecord& m = matmul[0];
  CHECK(m.kind == OpKind::kCublasLtMatmul);
  REQUIRE(m.algorithm.has_value());
  CHECK(m.algorithm->library == "cublasLt");
  CHECK(m.algorithm->opaque.size() == 64);
  // The program runs the heuristic's first result: the out-of-place split-K.
  CHECK(m.algorithm->opaque == std::get<Argument::Bytes>(first->value).data);
  CHECK(m.algorithm->determinism == Determinism::kNondeterministic);
  CHECK(m.algorithm->source == ChoiceSource::kRequested);
  CHECK(TextArg(m, "fingerprint") == TextArg(heuristic[0], "fingerprint"));
  CHECK(TextArg(m, "fingerprint").find("A=f32 32x1024 ld=32") != std::string::npos);
  REQUIRE(m.inputs.size() == 2);
  CHECK(Digest(m.inputs, "A").bytes == kMatrixBytes);
  REQUIRE(m.outputs.size() == 1);
  CHECK(Digest(m.outputs, "D").bytes == kResultBytes);
  std::remove(trace.c_str());
}

TEST_CASE("cublas: gemm --lt differs between runs, and is identical under --deterministic",
          "[tracer][cublas]") {
  const std::string trace = TempPath("gemm_lt_runs.ndt");
  std::set<std::pair<uint64_t, uint64_t>> inputs, outputs;
  for (int run = 0; run < 6 && outputs.size() < 2; ++run) {
    REQUIRE(RecordGemm(trace, "--lt").status == 0);
    const std::vector<OpRecord> matmul = Named(Ops(ReadAll(trace)), "cublasLtMatmul");
    REQUIRE(matmul.size() == 1);
    inputs.insert(Value(Digest(matmul[0].inputs, "A")));
    outputs.insert(Value(Digest(matmul[0].outputs, "D")));
  }
  CHECK(inputs.size() == 1);
  CHECK(outputs.size() >= 2);

  outputs.clear();
  for (int run = 0; run < 3; ++run) {
    const RunResult result = RecordGemm(trace, "--lt", "--deterministic");
    REQUIRE(result.status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> matmul = Named(Ops(records), "cublasLtMatmul");
    REQUIRE(matmul.size() == 1);
    REQUIRE(matmul[0].algorithm.has_value());
    CHECK(matmul[0].algorithm->determinism == Determinism::kDeterministic);
    outputs.insert(Value(Digest(matmul[0].outputs, "D")));
    // The heuristic's split-K result was filtered out, so the program never passed it.
    std::vector<PolicyDecisionRecord> decisions;
    for (const PolicyDecisionRecord& decision : Decisions(records)) {
      if (decision.library == "cublasLt") decisions.push_back(decision);
    }
    REQUIRE(decisions.size() == 1);
    CHECK(decisions[0].applied);
    CHECK(decisions[0].action.find("out-of-place split-K") != std::string::npos);
  }
  CHECK(outputs.size() == 1);
  std::remove(trace.c_str());
}

TEST_CASE("cublas: atomics make gemm differ between runs, and --deterministic forbids them",
          "[tracer][cublas]") {
  const std::string trace = TempPath("gemm_atomics.ndt");
  std::set<std::pair<uint64_t, uint64_t>> outputs;
  for (int run = 0; run < 6 && outputs.size() < 2; ++run) {
    REQUIRE(RecordGemm(trace, "--atomics").status == 0);
    const std::vector<OpRecord> sgemm = Named(Ops(ReadAll(trace)), "cublasSgemm_v2");
    REQUIRE(sgemm.size() == 1);
    REQUIRE(sgemm[0].algorithm.has_value());
    CHECK(sgemm[0].algorithm->determinism == Determinism::kNondeterministic);
    CHECK(TextArg(sgemm[0], "atomics") == "allowed");
    outputs.insert(Value(Digest(sgemm[0].outputs, "C")));
  }
  CHECK(outputs.size() >= 2);

  outputs.clear();
  for (int run = 0; run < 3; ++run) {
    REQUIRE(RecordGemm(trace, "--atomics --autotune", "--deterministic").status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> ops = Ops(records);
    const std::vector<OpRecord> gemm_ex = Named(ops, "cublasGemmEx");
    REQUIRE(gemm_ex.size() == 1);
    // Recorded as the program called it; run as the policy decided.
    CHECK(std::get<int64_t>(Arg(gemm_ex[0], "algo")->value) == 999);
    CHECK(gemm_ex[0].algorithm->id == -1);
    CHECK(gemm_ex[0].algorithm->source == ChoiceSource::kEnforced);
    outputs.insert(Value(Digest(gemm_ex[0].outputs, "C")));
    std::set<std::string> actions;
    for (const PolicyDecisionRecord& decision : Decisions(records)) {
      CHECK(decision.applied);
      actions.insert(decision.action.substr(0, decision.action.find(' ')));
      if (decision.action.rfind("replaced cublasGemmEx", 0) == 0) {
        // What the program asked for: autotuning (its atomics were forced off before).
        REQUIRE(decision.from_choice.has_value());
        CHECK(decision.from_choice->name == "CUBLAS_GEMM_AUTOTUNE");
        CHECK(decision.from_choice->source == ChoiceSource::kBenchmark);
      }
    }
    // "set": CUBLAS_WORKSPACE_CONFIG, set by the policy at load time.
    CHECK(actions == std::set<std::string>{"gave", "forced", "replaced", "set"});
  }
  CHECK(outputs.size() == 1);
  std::remove(trace.c_str());
}

TEST_CASE("cublas: --pin runs the recorded cuBLASLt algo where the program's own choice varies",
          "[tracer][cublas]") {
  // The program times the heuristic's deterministic algos and keeps the fastest: its choice
  // varies from run to run (timing noise).
  const std::string reference = TempPath("gemm_pin_reference.ndt");
  const std::string trace = TempPath("gemm_pinned.ndt");
  REQUIRE(RecordGemm(reference, "--heuristic-noise").status == 0);
  const std::vector<OpRecord> recorded = Named(Ops(ReadAll(reference)), "cublasLtMatmul");
  REQUIRE(recorded.size() >= 2);
  // What a pin forces: the algo the reference used most for the fingerprint (ties: the
  // latest), i.e. the one it kept after timing each candidate once.
  std::map<std::string, std::pair<size_t, size_t>> uses;  // opaque -> (count, last position)
  for (size_t i = 0; i < recorded.size(); ++i) {
    auto& [count, last] = uses[recorded[i].algorithm->opaque];
    ++count;
    last = i;
  }
  const std::string pinned =
      std::max_element(uses.begin(), uses.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      })->first;
  CHECK(pinned == recorded.back().algorithm->opaque);  // the kept one runs last

  std::set<std::string> own_choices;
  for (int run = 0; run < 12 && own_choices.size() < 2; ++run) {
    const RunResult result = Run("'" PROG_GEMM "' --heuristic-noise");
    REQUIRE(result.status == 0);
    own_choices.insert(Lines(result.out).at(0));
  }
  CHECK(own_choices.size() == 2);

  std::set<std::pair<uint64_t, uint64_t>> outputs;
  size_t applied = 0;
  for (int run = 0; run < 3; ++run) {
    REQUIRE(RecordGemm(trace, "--heuristic-noise", "--pin '" + reference + "'").status == 0);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<OpRecord> matmul = Named(Ops(records), "cublasLtMatmul");
    REQUIRE(matmul.size() == recorded.size());
    for (const OpRecord& op : matmul) {
      REQUIRE(op.algorithm.has_value());
      CHECK(op.algorithm->opaque == pinned);
    }
    outputs.insert(Value(Digest(matmul.back().outputs, "D")));
    for (const PolicyDecisionRecord& decision : Decisions(records)) {
      CHECK(decision.applied);
      applied += decision.applied;
    }
  }
  CHECK(outputs.size() == 1);
  CHECK(applied >= 3);  // every run timed an algo other than the pinned one
  std::remove(reference.c_str());
  std::remove(trace.c_str());
}

TEST_CASE("cublas: a pin that cannot apply is said once and the program keeps its own choice",
          "[tracer][cublas]") {
  const std::string observed = TempPath("gemm_unpinnable_observed.ndt");
  const std::string pin = TempPath("gemm_unpinnable_pin.ndt");
  const std::string trace = TempPath("gemm_unpinnable.ndt");
  REQUIRE(RecordGemm(observed, "--lt").status == 0);
  const std::vector<OpRecord> matmul = Named(Ops(ReadAll(observed)), "cublasLtMatmul");
  REQUIRE(matmul.size() == 1);
  REQUIRE(matmul[0].algorithm->determinism == Determinism::kNondeterministic);

  SECTION("a reference from another cuBLAS version") {
    ndt::format::TraceHeader header;
    header.versions.cublas = 120900;
    {
      auto writer = ndt::format::TraceWriter::Create(pin, header);
      REQUIRE(writer.ok());
      REQUIRE((*writer)->Append(Record(matmul[0])));
      REQUIRE((*writer)->Close().ok());
    }
    const RunResult result = RecordGemm(trace, "--lt 3", "--pin '" + pin + "'");
    REQUIRE(result.status == 0);
    CHECK(CountLines(result.err, "cannot pin cublasLtMatmul") == 1);
    CHECK(CountLines(result.err, "the reference used cuBLAS 120900") == 1);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
    REQUIRE(decisions.size() == 3);
    for (const PolicyDecisionRecord& decision : decisions) CHECK_FALSE(decision.applied);
    // The program's own choice ran: the heuristic's first, the split-K.
    for (const OpRecord& op : Named(Ops(records), "cublasLtMatmul")) {
      CHECK(op.algorithm->opaque == matmul[0].algorithm->opaque);
      CHECK(op.algorithm->source == ChoiceSource::kRequested);
    }
  }
  SECTION("a recorded algo that needs more workspace than the program gives") {
    const RunResult result =
        RecordGemm(trace, "--lt --small-workspace 3", "--pin '" + observed + "'");
    REQUIRE(result.status == 0);
    CHECK(CountLines(result.err, "workspace too small") == 1);
    const std::vector<Record> records = ReadAll(trace);
    const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
    REQUIRE(decisions.size() == 3);
    for (const PolicyDecisionRecord& decision : decisions) CHECK_FALSE(decision.applied);
    for (const OpRecord& op : Named(Ops(records), "cublasLtMatmul")) {
      CHECK(op.algorithm->opaque != matmul[0].algorithm->opaque);
      CHECK(op.status == 0);
    }
  }
  std::remove(observed.c_str());
  std::remove(pin.c_str());
  std::remove(trace.c_str());
}

TEST_CASE("cublas: ndtrace check names the cuBLASLt matmul, and --deterministic makes it pass",
          "[tracer][cublas]") {
  const std::string directory = TempPath("gemm_check");
  const RunResult diverged =
      Run("'" NDTRACE_BIN "' check -n 2 -o '" + directory + "' -- '" PROG_GEMM "' --lt");
  CHECK(diverged.status == 1);
  CHECK(diverged.out.find("error[nondeterministic_op]") != std::string::npos);
  CHECK(diverged.out.find("cublasLtMatmul") != std::string::npos);
  CHECK(diverged.out.find("splitK 4") != std::string::npos);

  const RunResult fixed = Run("'" NDTRACE_BIN "' check --deterministic -n 2 -o '" + directory +
                              "-det' -- '" PROG_GEMM "' --lt");
  CHECK(fixed.status == 0);
  CHECK(fixed.out.find("deterministic: 2 runs gave bitwise-identical results") !=
        std::string::npos);
  CHECK(std::system(("rm -rf '" + directory + "' '" + directory + "-det'").c_str()) == 0);
}

TEST_CASE("cublas: calls through dlopen(RTLD_LOCAL) + dlsym reach the hooks", "[tracer][cublas]") {
  // dlopen_cublas does not link libcublas.so.13: without our dlsym handing out the hooks, the
  // trace would hold the runtime's calls and no cuBLAS op.
  const std::string trace = TempPath("dlopen_cublas.ndt");
  std::remove(trace.c_str());
  const RunResult traced =
      Run("'" NDTRACE_BIN "' record -o '" + trace + "' -- '" PROG_DLOPEN_CUBLAS "'");
  INFO(traced.err);
  REQUIRE(traced.status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  CHECK(Named(ops, "cublasCreate_v2").size() == 1);
  const std::vector<OpRecord> gemms = Named(ops, "cublasSgemm_v2");
  REQUIRE(gemms.size() == 1);
  CHECK(gemms[0].kind == OpKind::kCublasGemm);
  CHECK(!gemms[0].outputs.empty());
  CHECK(Named(ops, "cublasDestroy_v2").size() == 1);
  // The untraced program computes the same product.
  const RunResult plain =
      Run("LD_LIBRARY_PATH='" NDT_STANDIN_DIR "' '" PROG_DLOPEN_CUBLAS "'");
  CHECK(plain.status == 0);
  CHECK(plain.out == traced.out);
}

// Metadata only (NDTRACE_LIBRARY_DIGESTS=0, as `ndtrace run` records), a GEMM or cuBLASLt matmul
// takes the raw path: the hook keeps the call's facts and the encoder thread builds the record.
// Every one must come out as the hook builds it when digests are on: same arguments, in the same
// order, same algorithm, same place; only the digests are missing.
TEST_CASE("cublas: metadata only, GEMM and cuBLASLt matmul records are built off the calling "
          "thread and equal the records with digests, digests aside",
          "[tracer][cublas]") {
  const auto gemms = [](const std::string& trace) {
    std::vector<OpRecord> found;
    for (const OpRecord& op : Ops(ReadAll(trace))) {
      if (op.kind == OpKind::kCublasGemm || op.kind == OpKind::kCublasLtMatmul) {
        found.push_back(op);
      }
    }
    return found;
  };
  const std::string with = TempPath("gemm_digests.ndt");
  const std::string without = TempPath("gemm_metadata.ndt");
  struct Case {
    std::string program, options;
    bool deterministic;  // prints the same checksum in every run, traced or not
  };
  for (const Case& c : {Case{"'" PROG_GEMM "'", "", true},
                        Case{"'" PROG_GEMM "' --atomics --autotune", "--deterministic", false},
                        Case{"'" PROG_GEMM "' --atomics", "", false},
                        Case{"'" PROG_GEMM "' --lt", "", false},
                        Case{"'" PROG_GEMM "' --lt", "--deterministic", false},
                        Case{"'" CORPUS_BLAS_THREADS "'", "", true}}) {
    INFO(c.program << " " << c.options);
    std::remove(with.c_str());
    std::remove(without.c_str());
    const RunResult digests =
        Run("'" NDTRACE_BIN "' record " + c.options + " -o '" + with + "' -- " + c.program);
    const RunResult metadata = Run("NDTRACE_LIBRARY_DIGESTS=0 '" NDTRACE_BIN "' record " +
                                   c.options + " -o '" + without + "' -- " + c.program);
    REQUIRE(digests.status == 0);
    REQUIRE(metadata.status == 0);
    if (c.deterministic) CHECK(metadata.out == Run(c.program).out);
    const std::vector<OpRecord> a = gemms(with);
    const std::vector<OpRecord> b = gemms(without);
    REQUIRE(!a.empty());
    REQUIRE(a.size() == b.size());
    // Threads interleave differently from run to run: compare per thread, in op order.
    const auto by_thread = [](std::vector<OpRecord> ops) {
      std::stable_sort(ops.begin(), ops.end(), [](const OpRecord& x, const OpRecord& y) {
        return x.thread_id < y.thread_id;
      });
      return ops;
    };
    const std::vector<OpRecord> sorted_a = by_thread(a), sorted_b = by_thread(b);
    for (size_t i = 0; i < sorted_a.size(); ++i) {
      const OpRecord& x = sorted_a[i];
      const OpRecord& y = sorted_b[i];
      INFO("GEMM " << i << ": " << x.name);
      CHECK(x.name == y.name);
      CHECK(x.thread_id == y.thread_id);
      CHECK(x.stream_id == y.stream_id);
      CHECK(x.status == y.status);
      CHECK(x.nvtx_range_id == y.nvtx_range_id);
      CHECK(!x.inputs.empty());
      CHECK(y.inputs.empty());
      CHECK(y.outputs.empty());
      CHECK(x.algorithm == y.algorithm);
      REQUIRE(x.args.size() == y.args.size());
      for (size_t j = 0; j < x.args.size(); ++j) {
        INFO("argument " << x.args[j].name);
        CHECK(x.args[j].name == y.args[j].name);
        const auto* pointer = std::get_if<ndt::format::DevicePointer>(&x.args[j].value);
        if (pointer != nullptr) {
          // The same allocation and offset; its raw address is the run's own.
          const auto* other = std::get_if<ndt::format::DevicePointer>(&y.args[j].value);
          REQUIRE(other != nullptr);
          CHECK(pointer->allocation_id == other->allocation_id);
          CHECK(pointer->offset == other->offset);
        } else {
          CHECK(x.args[j].value == y.args[j].value);
        }
      }
    }
  }
  std::remove(with.c_str());
  std::remove(without.c_str());
}

TEST_CASE("cublas: axpy, dot, gemv and strided batched GEMMs are recorded with "
          "exact-extent digests",
          "[tracer][cublas]") {
  // tests/corpus/blas_threads: 4 threads x 3 iterations of sgemm, strided batched sgemm (4
  // blocks of 16x16, B transposed, lda = ldb = 64), sgemv, saxpy and sdot over 64 elements,
  // then in device pointer mode an sdot into device memory and an sscal reading it there.
  const std::string trace = TempPath("blas_threads.ndt");
  const RunResult traced = RecordRun(trace, CORPUS_BLAS_THREADS);
  INFO(traced.err);
  REQUIRE(traced.status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  const std::vector<OpRecord> axpy = Named(ops, "cublasSaxpy_v2");
  const std::vector<OpRecord> dot = Named(ops, "cublasSdot_v2");
  const std::vector<OpRecord> gemv = Named(ops, "cublasSgemv_v2");
  const std::vector<OpRecord> batched = Named(ops, "cublasSgemmStridedBatched");
  REQUIRE(axpy.size() == 12);
  REQUIRE(dot.size() == 24);
  REQUIRE(gemv.size() == 12);
  REQUIRE(batched.size() == 12);

  CHECK(std::get<int64_t>(Arg(axpy[0], "n")->value) == 64);
  CHECK(std::get<double>(Arg(axpy[0], "alpha")->value) == 0.5);
  CHECK(Digest(axpy[0].inputs, "x").bytes == 256);
  CHECK(Digest(axpy[0].inputs, "y").bytes == 256);
  CHECK(Digest(axpy[0].outputs, "y").bytes == 256);

  // The dot product's result is host memory: recorded as an argument, equal to what the
  // program printed into its checksum (not compared here), and finite.
  REQUIRE(Arg(dot[0], "result") != nullptr);
  CHECK(std::holds_alternative<double>(Arg(dot[0], "result")->value));
  CHECK(TextArg(dot[0], "pointerMode") == "host");
  CHECK(dot[0].outputs.empty());

  // Device pointer mode: the dot's result is an output, the scale the sscal reads an input.
  std::vector<OpRecord> device_dots;
  for (const OpRecord& op : dot) {
    if (TextArg(op, "pointerMode") == "device") device_dots.push_back(op);
  }
  REQUIRE(device_dots.size() == 12);
  CHECK(Digest(device_dots[0].outputs, "result").bytes == 4);
  const std::vector<OpRecord> scal = Named(ops, "cublasSscal_v2");
  REQUIRE(scal.size() == 12);
  CHECK(Digest(scal[0].inputs, "alpha").bytes == 4);
  CHECK(Digest(scal[0].inputs, "x").bytes == 256);

  CHECK(gemv[0].kind == OpKind::kCublasGemm);
  CHECK(Digest(gemv[0].inputs, "A").bytes == 64 * 64 * 4);
  CHECK(Digest(gemv[0].outputs, "y").bytes == 256);
  CHECK(gemv[0].inputs.size() == 2);  // beta = 0: y is not read

  const OpRecord& b = batched[0];
  CHECK(b.kind == OpKind::kCublasGemm);
  CHECK(std::get<int64_t>(Arg(b, "batchCount")->value) == 4);
  CHECK(std::get<int64_t>(Arg(b, "strideB")->value) == 16 * 64);
  // A: 16x16 blocks with lda 64, 16 elements apart; B transposed: 16x16 with ldb 64, 1024
  // apart; C: packed 16x16 blocks.
  CHECK(Digest(b.inputs, "A").bytes == ((15 * 64 + 16) + 3 * 16) * 4);
  CHECK(Digest(b.inputs, "B").bytes == ((15 * 64 + 16) + 3 * 1024) * 4);
  CHECK(Digest(b.outputs, "C").bytes == 4 * 256 * 4);
  std::remove(trace.c_str());
}

TEST_CASE("cublas: the double-precision calls are recorded with f64 extents and host results",
          "[tracer][cublas]") {
  // tests/corpus/cg_solver: A (48 x 48) formed by one cublasDgemm_v2 (transa T, beta 1), two
  // conjugate-gradient solves of 17 iterations each (Dgemv, Ddot in host pointer mode, Daxpy,
  // Dscal), both residuals by one cublasDgemmStridedBatched with A shared (stride 0).
  const std::string trace = TempPath("cg_solver.ndt");
  const RunResult traced = RecordRun(trace, CORPUS_CG_SOLVER);
  INFO(traced.err);
  REQUIRE(traced.status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  constexpr uint64_t kMatrix = 48 * 48 * 8, kVector = 48 * 8;
  using ndt::format::DType;

  const std::vector<OpRecord> gemm = Named(ops, "cublasDgemm_v2");
  REQUIRE(gemm.size() == 1);
  CHECK(gemm[0].kind == OpKind::kCublasGemm);
  CHECK_THAT(TextArg(gemm[0], "fingerprint"),
             Catch::StartsWith("cublasDgemm_v2 op=T,N m=48 n=48 k=48") &&
                 Catch::Contains("A=f64 B=f64 C=f64"));
  CHECK(std::get<double>(Arg(gemm[0], "beta")->value) == 1.0);
  CHECK(Digest(gemm[0].inputs, "A").bytes == kMatrix);
  CHECK(Digest(gemm[0].inputs, "A").dtype == DType::kF64);
  CHECK(Digest(gemm[0].inputs, "C").bytes == kMatrix);  // beta = 1: C is read
  CHECK(Digest(gemm[0].outputs, "C").bytes == kMatrix);

  const std::vector<OpRecord> batched = Named(ops, "cublasDgemmStridedBatched");
  REQUIRE(batched.size() == 1);
  CHECK(std::get<int64_t>(Arg(batched[0], "strideA")->value) == 0);
  CHECK(Digest(batched[0].inputs, "A").bytes == kMatrix);  // shared by both batches
  CHECK(Digest(batched[0].inputs, "B").bytes == 2 * kVector);
  CHECK(Digest(batched[0].outputs, "C").bytes == 2 * kVector);

  const std::vector<OpRecord> gemv = Named(ops, "cublasDgemv_v2");
  const std::vector<OpRecord> dot = Named(ops, "cublasDdot_v2");
  const std::vector<OpRecord> axpy = Named(ops, "cublasDaxpy_v2");
  const std::vector<OpRecord> scal = Named(ops, "cublasDscal_v2");
  CHECK(gemv.size() == 34);
  CHECK(dot.size() == 2 + 2 * 34);
  CHECK(axpy.size() == 3 * 34);
  CHECK(scal.size() == 34);
  REQUIRE(!gemv.empty());
  REQUIRE(!dot.empty());
  REQUIRE(!scal.empty());
  CHECK(Digest(gemv[0].inputs, "A").bytes == kMatrix);
  CHECK(Digest(gemv[0].inputs, "x").dtype == DType::kF64);
  CHECK(Digest(gemv[0].outputs, "y").bytes == kVector);
  CHECK(gemv[0].inputs.size() == 2);  // beta = 0: y is not read
  // Host pointer mode: the result is an argument, as precise as the double it was.
  REQUIRE(Arg(dot[0], "result") != nullptr);
  CHECK(std::get<double>(Arg(dot[0], "result")->value) > 0);
  CHECK(dot[0].outputs.empty());
  CHECK(Digest(scal[0].outputs, "x").bytes == kVector);
  std::remove(trace.c_str());
}

TEST_CASE(
    "cublas: norms, sums, extreme indices, copies, swaps and geam are recorded with their "
    "vectors, results by pointer mode",
    "[tracer][cublas]") {
  // corpus/pagerank: two threads' power iterations (Sgemv, Saxpy, Sasum and Sscal, Sgeam for the
  // change, Snrm2 of it: thread 0 in host pointer mode, thread 1 in device pointer mode, Sswap),
  // then Scopy and Isamax of each ranking, the rankings transposed by one Sgeam (beta = 0) and
  // read back with cublasGetMatrix; the link matrix uploaded by cublasSetMatrix.
  const std::string trace = TempPath("pagerank.ndt");
  const RunResult traced = RecordRun(trace, CORPUS_PAGERANK);
  INFO(traced.err);
  REQUIRE(traced.status == 0);
  const std::vector<OpRecord> ops = Ops(ReadAll(trace));
  constexpr uint64_t kVector = 64 * 4;
  using ndt::format::DType;

  const std::vector<OpRecord> nrm2 = Named(ops, "cublasSnrm2_v2");
  const std::vector<OpRecord> asum = Named(ops, "cublasSasum_v2");
  const std::vector<OpRecord> geam = Named(ops, "cublasSgeam");
  const std::vector<OpRecord> swap = Named(ops, "cublasSswap_v2");
  REQUIRE(!nrm2.empty());
  CHECK(asum.size() == nrm2.size());
  CHECK(swap.size() == nrm2.size());
  CHECK(geam.size() == nrm2.size() + 1);
  size_t host_results = 0, device_results = 0;
  for (const OpRecord& op : nrm2) {
    CHECK(Digest(op.inputs, "x").bytes == kVector);
    if (TextArg(op, "pointerMode") == "host") {
      ++host_results;
      REQUIRE(Arg(op, "result") != nullptr);
      CHECK(std::get<double>(Arg(op, "result")->value) > 0);
      CHECK(op.outputs.empty());
    } else {
      ++device_results;
      CHECK(Arg(op, "result") == nullptr);
      CHECK(Digest(op.outputs, "result").bytes == 4);
      CHECK(Digest(op.outputs, "result").dtype == DType::kF32);
    }
  }
  CHECK(host_results > 0);
  CHECK(device_results > 0);
  CHECK(Digest(swap[0].inputs, "y").bytes == kVector);
  CHECK(Digest(swap[0].outputs, "x").bytes == kVector);
  CHECK(Digest(swap[0].outputs, "y").bytes == kVector);

  // The change y - x reads both; the transpose's beta is 0: B is not read.
  CHECK(geam[0].inputs.size() == 2);
  CHECK(Digest(geam[0].inputs, "B").bytes == kVector);
  CHECK(Digest(geam[0].outputs, "C").bytes == kVector);
  const OpRecord& transpose = geam.back();
  CHECK(TextArg(transpose, "transa") == "T");
  CHECK(transpose.inputs.size() == 1);
  CHECK(Digest(transpose.inputs, "A").bytes == 2 * kVector);
  CHECK(Digest(transpose.outputs, "C").bytes == 2 * kVector);

  const std::vector<OpRecord> copy = Named(ops, "cublasScopy_v2");
  const std::vector<OpRecord> amax = Named(ops, "cublasIsamax_v2");
  CHECK(copy.size() == 4);  // x = v, and the ranking into its column, per thread
  REQUIRE(amax.size() == 2);
  CHECK(Digest(copy[0].outputs, "y").bytes == kVector);
  const double top = std::get<double>(Arg(amax[0], "result")->value);  // 1-based
  CHECK(top >= 1);
  CHECK(top <= 64);

  // cublasSetMatrix into padded columns: one pitched copy of the 64 columns.
  const std::vector<OpRecord> set_matrix = Named(ops, "cuMemcpy2D_v2");
  REQUIRE(!set_matrix.empty());
  CHECK(std::get<uint64_t>(Arg(set_matrix[0], "height")->value) == 64);
  CHECK(std::get<uint64_t>(Arg(set_matrix[0], "dstPitch")->value) == 72 * 4);
  std::remove(trace.c_str());
}
