// Standalone replay of cuDNN backend plans end to end on the stand-in device: `ndtrace record
// --capture` stores a cudnnBackendExecute's tensors and its operation graph, and `ndtrace replay
// TRACE --op N` rebuilds the graph, the recorded engine and its plan through the backend API
// and runs it alone: the stand-in's racing engine 1 varies, its deterministic engines 0, 2 and 3
// do not and reproduce the recorded output, its engine 3 (no backward filter) is listed as
// skipped; uncaptured ops and graphs that cannot be rebuilt are refused. Exit codes: 0 stable,
// 1 varies, 2 error. Stand-in results only.
#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "support/captured_trace.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
using ndt::format::OpKind;

const std::string kNdtrace = "'" NDTRACE_BIN "'";
const std::string kConvBackend = "'" PROG_CONV_BACKEND "'";

// `ndtrace record [--capture CAPTURE] -o TRACE -- conv_backend ARGS`.
RunResult RecordConv(const std::string& trace, const std::string& capture,
                     const std::string& args = "") {
  std::remove(trace.c_str());
  return Run(kNdtrace + " record " + (capture.empty() ? "" : "--capture " + capture) + " -o '" +
             trace + "' -- " + kConvBackend + " " + args);
}

std::vector<OpRecord> Executes(const std::vector<Record>& records) {
  std::vector<OpRecord> found;
  for (const OpRecord& op : Ops(records)) {
    if (op.kind == OpKind::kCudnnBackendExecute) found.push_back(op);
  }
  return found;
}

// The one captured execute of a `conv_backend ARGS` recording.
OpRecord RecordOneExecute(const std::string& trace, const std::string& args) {
  const RunResult recorded = RecordConv(trace, "cudnnBackendExecute", args);
  INFO(recorded.out << recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<OpRecord> executes = Executes(ReadAll(trace));
  REQUIRE(executes.size() == 1);
  return executes[0];
}

TEST_CASE("record --capture stores a backend execute's tensors and its operation graph",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  const OpRecord op = RecordOneExecute(trace, "");
  // beta = 0: y is written, not read, so it is captured after the call only.
  REQUIRE(Text(op, "blob:in:x"));
  REQUIRE(Text(op, "blob:in:w"));
  REQUIRE(Text(op, "blob:out:y"));
  CHECK_FALSE(Text(op, "blob:in:y"));
  auto reader = ndt::format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  for (const auto& [name, digests] :
       {std::pair{std::string("blob:in:"), &op.inputs}, {"blob:out:", &op.outputs}}) {
    REQUIRE_FALSE(digests->empty());
    for (const ndt::format::BufferDigest& digest : *digests) {
      auto bytes = (*reader)->ReadBlob(ParseId(*Text(op, name + digest.role)));
      REQUIRE(bytes.ok());
      CHECK(bytes->size() == digest.bytes);
    }
  }
  CHECK(Text(op, "graph") ==
        "cudnn_graph v1\n"
        "tensor x uid=1 dtype=f32 dims=2,16,12,12 strides=2304,144,12,1 align=16 virtual=0\n"
        "tensor w uid=2 dtype=f32 dims=8,16,3,3 strides=144,9,3,1 align=16 virtual=0\n"
        "tensor y uid=3 dtype=f32 dims=2,8,12,12 strides=1152,144,12,1 align=16 virtual=0\n"
        "op conv_fwd x=x w=w y=y mode=cross_correlation comp=f32 spatial=2 pre_pad=1,1 "
        "post_pad=1,1 stride=1,1 dilation=1,1 alpha=1 beta=0 scalar=f32\n");
  // The engine to rebuild is the op's choice; capture adds arguments, it changes none.
  REQUIRE(op.algorithm);
  CHECK(op.algorithm->id == 1);
  const std::string plain = (dir / "plain.ndt").string();
  REQUIRE(RecordConv(plain, "").status == 0);
  const std::vector<OpRecord> uncaptured = Executes(ReadAll(plain));
  REQUIRE(uncaptured.size() == 1);
  CHECK_FALSE(Text(uncaptured[0], "graph"));
  for (const Argument& argument : uncaptured[0].args) {
    bool found = false;
    for (const Argument& captured : op.args) found = found || captured.name == argument.name;
    CHECK(found);
  }
  CHECK(Text(uncaptured[0], "fingerprint") == Text(op, "fingerprint"));
}

TEST_CASE(
    "replay --op shows that a captured execute on the racing engine varies alone and "
    "that the deterministic engines do not",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  const OpRecord op = RecordOneExecute(trace, "");  // the heuristics' first config: engine 1
  const RunResult replayed = Replay(trace, op.sequence, "--repeat 10");
  INFO(replayed.out << replayed.err);
  CHECK(replayed.status == 1);
  CHECK(Contains(replayed.out, "VARIES on its own: 10 runs of engine 1 knobs split_k_slc=4"));

  const RunResult tried = Replay(trace, op.sequence, "--repeat 10 --try-deterministic");
  INFO(tried.out << tried.err);
  CHECK(tried.status == 1);
  std::vector<std::string> rows;
  for (const std::string& line : Lines(tried.out)) {
    if (line.size() > 3 && line[2] >= '0' && line[2] <= '9') rows.push_back(line);
  }
  // The recorded engine, then engines 0, 2 and 3 with their default knobs (the stand-in
  // numbers four engines; engine 1 is noted nondeterministic and is no alternative).
  REQUIRE(rows.size() == 4);
  CHECK(Contains(rows[0], "1 engine 1 knobs split_k_slc=4 (recorded)"));
  CHECK(Contains(rows[0], "nondeterministic"));
  CHECK(Contains(rows[0], "VARIES"));
  for (const char* engine : {"0", "2", "3"}) {
    bool stable = false;
    for (size_t i = 1; i < rows.size(); ++i) {
      if (rows[i].rfind(std::string("  ") + engine + " engine " + engine + " default knobs", 0) ==
          0) {
        stable = Contains(rows[i], " deterministic ") && Contains(rows[i], "stable");
      }
    }
    INFO("engine " << engine);
    CHECK(stable);
  }
  CHECK(Contains(tried.out,
                 "deterministic alternatives with stable output: engine 0 default knobs ("));
}

TEST_CASE(
    "replay --op of a captured execute on a deterministic engine is stable and "
    "reproduces the recorded output",
    "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  for (const char* engine : {"0", "2"}) {
    const std::string trace = (dir / (std::string("engine") + engine + ".ndt")).string();
    const OpRecord op = RecordOneExecute(trace, std::string("--engine ") + engine);
    REQUIRE(op.algorithm);
    CHECK(op.algorithm->id == std::stoll(engine));
    const RunResult replayed = Replay(trace, op.sequence, "--repeat 5");
    INFO(replayed.out << replayed.err);
    CHECK(replayed.status == 0);
    CHECK(Contains(replayed.out, std::string("is stable: 5 runs of engine ") + engine));
    CHECK(Contains(replayed.out, " 5/5 "));  // every run equals the recorded output bitwise
  }
}

TEST_CASE("replay --op rebuilds backward-data and backward-filter graphs: the racing engine "
          "varies, the deterministic ones reproduce the recorded output, one without the "
          "operation is listed as skipped",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  for (const auto& [direction, kind, output] :
       {std::tuple{"bwd_data", "op conv_bwd_data w=w dy=dy dx=dx", "dx"},
        std::tuple{"bwd_filter", "op conv_bwd_filter x=x dy=dy dw=dw", "dw"}}) {
    INFO(direction);
    const std::string racing = (dir / (std::string(direction) + ".ndt")).string();
    const OpRecord op = RecordOneExecute(racing, std::string("--direction ") + direction);
    REQUIRE(Text(op, "graph"));
    CHECK(Contains(*Text(op, "graph"), kind));
    CHECK(Text(op, std::string("blob:out:") + output));
    const RunResult tried = Replay(racing, op.sequence, "--repeat 10 --try-deterministic");
    INFO(tried.out << tried.err);
    CHECK(tried.status == 1);
    CHECK(Contains(tried.out, std::string("output compared: ") + output + " ("));
    CHECK(Contains(tried.out, "VARIES on its own: 10 runs of engine 1 knobs split_k_slc=4"));
    CHECK(Contains(tried.out, "deterministic alternatives with stable output: engine 0 default "
                              "knobs ("));
    // The stand-in's engine 3 has no backward-filter kernel: listed, not run.
    const bool filter = std::string(direction) == "bwd_filter";
    CHECK(Contains(tried.out, "engine 2 default knobs ("));
    CHECK(Contains(tried.out, "engine 3 default knobs (") == !filter);
    if (filter) {
      CHECK(Contains(tried.out, "3 engine 3 default knobs"));
      CHECK(Contains(tried.out, "skipped: not supported for this graph (cudnnBackendFinalize("
                                "engine): CUDNN_STATUS_NOT_SUPPORTED"));
    }

    const std::string stable = (dir / (std::string(direction) + "_engine2.ndt")).string();
    const OpRecord deterministic =
        RecordOneExecute(stable, std::string("--engine 2 --direction ") + direction);
    const RunResult replayed = Replay(stable, deterministic.sequence, "--repeat 5");
    INFO(replayed.out << replayed.err);
    CHECK(replayed.status == 0);
    CHECK(Contains(replayed.out, "is stable: 5 runs of engine 2"));
    CHECK(Contains(replayed.out, " 5/5 "));
  }
}

TEST_CASE("replay --op refuses an uncaptured execute and a graph it cannot rebuild",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string plain = (dir / "plain.ndt").string();
  REQUIRE(RecordConv(plain, "").status == 0);
  const std::vector<OpRecord> executes = Executes(ReadAll(plain));
  REQUIRE(executes.size() == 1);
  const RunResult uncaptured = Replay(plain, executes[0].sequence);
  CHECK(uncaptured.status == 2);
  CHECK(Contains(uncaptured.err, "was not captured: record it with `ndtrace record --capture " +
                                     std::to_string(executes[0].sequence)));

  const std::string trace = (dir / "conv.ndt").string();
  const OpRecord op = RecordOneExecute(trace, "");
  const auto edited = [&](const std::string& name, const std::function<void(std::string*)>& edit) {
    const std::string path = (dir / name).string();
    RewriteTrace(trace, path, nullptr, [&](OpRecord* record) {
      if (record->sequence != op.sequence) return;
      for (Argument& argument : record->args) {
        if (argument.name == "graph") edit(&std::get<std::string>(argument.value));
      }
    });
    return Replay(path, op.sequence);
  };
  const auto replace = [](std::string* text, const std::string& from, const std::string& to) {
    const size_t at = text->find(from);
    REQUIRE(at != std::string::npos);
    text->replace(at, from.size(), to);
  };

  const RunResult other_op =
      edited("matmul.ndt", [&](std::string* graph) { replace(graph, "op conv_fwd", "op matmul"); });
  INFO(other_op.out << other_op.err);
  CHECK(other_op.status == 2);
  CHECK(Contains(other_op.err, "error: replay: "));
  CHECK(Contains(other_op.err,
                 "cannot rebuild its cuDNN graph: its operation matmul is not a "
                 "convolution"));
  CHECK(other_op.out.empty());

  const RunResult version = edited(
      "v2.ndt", [&](std::string* graph) { replace(graph, "cudnn_graph v1", "cudnn_graph v2"); });
  CHECK(version.status == 2);
  CHECK(Contains(version.err, "cannot rebuild its cuDNN graph: its description is not"));

  const RunResult dims = edited("dims.ndt", [&](std::string* graph) {
    replace(graph, "dims=2,16,12,12", "dims=2,16,-12,12");
  });
  CHECK(dims.status == 2);
  CHECK(Contains(dims.err, "cannot rebuild its cuDNN graph: bad line: tensor x"));

  // A tensor larger than any capture: refused before anything is allocated for it.
  const RunResult huge = edited("huge.ndt", [&](std::string* graph) {
    replace(graph, "dims=2,16,12,12", "dims=2000000,16,12,12");
  });
  CHECK(huge.status == 2);
  CHECK(Contains(huge.err, "cannot rebuild its cuDNN graph: tensor x is too large"));

  // Paddings that do not give y's dims: the rebuilt operation does not finalize.
  const RunResult shape = edited("shape.ndt", [&](std::string* graph) {
    replace(graph, "pre_pad=1,1 post_pad=1,1", "pre_pad=0,0 post_pad=0,0");
  });
  INFO(shape.err);
  CHECK(shape.status == 2);
  CHECK(Contains(shape.err, "rebuilding its cuDNN graph: conv_fwd: cudnnBackendFinalize"));
}

}  // namespace
