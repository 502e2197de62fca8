// Window replay end to end on the stand-in device: `ndtrace record --window A:B` of
// tests/corpus/window_train (two streams, a pinned staging buffer and events, cuDNN
// convolutions, cuBLAS GEMMs, memset, kernels, copies back to the host), the program then
// deleted, and `ndtrace replay TRACE --window A:B` from the trace alone. With --plant the
// convolution's backward filter (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, racing atomics on the
// stand-in) must be named; without it the window replays identical; --try-deterministic shows
// the fix. Refusals: ops the trace did not keep, another GPU or driver without --force.
// Exit codes: 0 identical, 1 varies, 2 error. Stand-in results only.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/records.h"
#include "support/captured_trace.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

// The window recorded and replayed: it starts in the program's second step and covers more
// than two of its steps.
constexpr uint64_t kFirst = 30, kLast = 79;
const std::string kWindow = std::to_string(kFirst) + ":" + std::to_string(kLast);

// Records window_train (a copy of it in `dir`, which is then deleted) with --window kWindow.
RunResult RecordWindowThenDelete(const std::filesystem::path& dir, const std::string& trace,
                                 const std::string& args) {
  const std::filesystem::path program = dir / "window_train";
  std::filesystem::copy_file(CORPUS_WINDOW_TRAIN, program);
  const RunResult recorded =
      Run("NDT_STANDIN_ASYNC=1 '" NDTRACE_BIN "' record --window " + kWindow + " -o '" + trace +
          "' -- '" + program.string() + "' " + args);
  std::filesystem::remove(program);
  REQUIRE_FALSE(std::filesystem::exists(program));
  return recorded;
}

RunResult ReplayWindow(const std::string& trace, const std::string& window,
                       const std::string& options = "") {
  return Run("'" NDTRACE_BIN "' replay '" + trace + "' --window " + window + " " + options);
}

// The sequences of the ops named `name` in the window.
std::vector<uint64_t> InWindow(const std::string& trace, const std::string& name) {
  std::vector<uint64_t> found;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.name == name && op.sequence >= kFirst && op.sequence <= kLast) {
      found.push_back(op.sequence);
    }
  }
  return found;
}

TEST_CASE(
    "a window recorded from window_train --plant replays with the program deleted and names the "
    "planted backward filter convolution, and its deterministic alternative replays identical",
    "[tracer][window_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "window.ndt").string();
  const RunResult recorded = RecordWindowThenDelete(dir.path(), trace, "--plant");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<uint64_t> filters = InWindow(trace, "cudnnConvolutionBackwardFilter");
  REQUIRE(filters.size() >= 2);
  // The window holds every family the program drives, captured.
  for (const char* name : {"cudnnConvolutionForward", "cublasSgemm_v2", "cuMemsetD8Async",
                           "cuMemcpyHtoDAsync_v2", "cuStreamWaitEvent"}) {
    CHECK_FALSE(InWindow(trace, name).empty());
  }

  const RunResult replayed = ReplayWindow(trace, kWindow);
  INFO(replayed.out << replayed.err);
  CHECK(replayed.status == 1);
  const std::string first = std::to_string(filters.front());
  CHECK(Contains(replayed.out, "error[nondeterministic_op]: op " + first +
                                   " gives different outputs when the window is replayed"));
  CHECK(Contains(replayed.out, "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0"));
  CHECK(Contains(replayed.out, "help: "));
  CHECK(Contains(replayed.out, "ndtrace replay: window " + std::to_string(kFirst) + ".." +
                                   std::to_string(kLast) + " VARIES at op " + first));
  // Everything before it replayed stable and as recorded (the window's own inputs).
  for (const std::string& line : Lines(replayed.out)) {
    if (line.rfind("  op ", 0) == 0 && line.find("VARIES") == std::string::npos) {
      CHECK(Contains(line, "1 distinct"));
      CHECK(Contains(line, "recorded   5/5"));
    }
  }

  const RunResult fixed = ReplayWindow(trace, kWindow, "--try-deterministic");
  INFO(fixed.out << fixed.err);
  CHECK(fixed.status == 1);
  for (uint64_t op : filters) {
    CHECK(Contains(fixed.out, "fix: op " + std::to_string(op) +
                                  " (cudnnConvolutionBackwardFilter) replayed with "
                                  "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: stable"));
  }
  CHECK(Contains(fixed.out, "VARIES at op " + first + "; identical in 5 repeats with the fixes"));
}

TEST_CASE("a window of window_train without the plant replays identical from the trace alone",
          "[tracer][window_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "window.ndt").string();
  const RunResult recorded = RecordWindowThenDelete(dir.path(), trace, "");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const RunResult replayed = ReplayWindow(trace, kWindow, "--repeat 3");
  INFO(replayed.out << replayed.err);
  CHECK(replayed.status == 0);
  CHECK(Contains(replayed.out, "identical in 3 repeats (50 ops)"));
  CHECK_FALSE(Contains(replayed.out, "VARIES"));
  CHECK_FALSE(Contains(replayed.out, "other than the recorded one"));
  // A window inside the recorded one, and one to the end of the recorded one.
  CHECK(ReplayWindow(trace, "40:60", "--repeat 2").status == 0);
}

TEST_CASE(
    "window replay refuses ops the trace did not keep, a malformed window, and another GPU or "
    "driver unless forced",
    "[tracer][window_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "window.ndt").string();
  // Six steps: the ops after the recorded window include the next step's upload, whose source
  // the trace did not keep.
  REQUIRE(RecordWindowThenDelete(dir.path(), trace, "--steps 6").status == 0);

  // Starting before the recorded window: its first ops' inputs were not captured.
  const RunResult early = ReplayWindow(trace, "10:" + std::to_string(kLast));
  CHECK(early.status == 2);
  CHECK(Contains(early.err, "which the trace did not keep"));
  CHECK(Contains(early.err, "the trace captured ops "));
  CHECK(early.out.empty());
  // To the end of the trace: past the recorded window.
  const RunResult late = ReplayWindow(trace, std::to_string(kFirst) + ":");
  CHECK(late.status == 2);
  CHECK(Contains(late.err, "which the trace did not keep"));
  for (const char* bad : {"5", "9:3", "a:b", ":4"}) {
    const RunResult malformed = ReplayWindow(trace, bad);
    CHECK(malformed.status == 2);
    CHECK(Contains(malformed.err, "error: replay: --window"));
  }

  const std::string other_gpu = (dir / "h200.ndt").string();
  RewriteTrace(
      trace, other_gpu,
      [](ndt::format::TraceHeader* header) {
        REQUIRE_FALSE(header->gpus.empty());
        header->gpus[0].name = "NVIDIA H200";
        header->gpus[0].simulated = false;
      },
      nullptr);
  const RunResult refused = ReplayWindow(other_gpu, kWindow);
  CHECK(refused.status == 2);
  CHECK(Contains(refused.err, "recorded on another machine (GPU 'NVIDIA H200' in the trace"));
  CHECK(Contains(refused.err, "a trace contains code"));
  CHECK(Contains(refused.err, "--force"));
  const RunResult forced = ReplayWindow(other_gpu, kWindow, "--repeat 2 --force");
  INFO(forced.out << forced.err);
  CHECK(forced.status == 0);
  CHECK(Contains(forced.err, "warning: replay: forced"));

  const std::string other_driver = (dir / "driver.ndt").string();
  RewriteTrace(
      trace, other_driver,
      [](ndt::format::TraceHeader* header) { header->versions.driver = 12080; }, nullptr);
  const RunResult driver = ReplayWindow(other_driver, kWindow);
  CHECK(driver.status == 2);
  CHECK(Contains(driver.err, "driver 12080 in the trace"));
}

}  // namespace

namespace {

// Records PROGRAM ARGS with `--window 0:` (every op captured) and replays `--window 0:`.
RunResult WholeRunReplayed(const std::filesystem::path& dir, const std::string& program,
                           const std::string& args) {
  const std::string trace = (dir / "whole.ndt").string();
  std::filesystem::remove(trace);
  const RunResult recorded = Run("'" NDTRACE_BIN "' record --quiet --window 0: -o '" + trace +
                                 "' -- '" + program + "' " + args);
  REQUIRE(recorded.status == 0);
  return ReplayWindow(trace, "0:", "--repeat 4");
}

TEST_CASE(
    "window replay re-executes cuBLASLt, cuDNN backend and RNN, cuRAND and kernels on several "
    "threads, and refuses a CUDA graph launch",
    "[tracer][window_replay]") {
  ndt::testing::TempDir dir;
  struct Case {
    std::string program, args;
    int status;
    std::string expected;  // in stdout (status 0, 1) or stderr (2)
  };
  const std::vector<Case> cases = {
      // The stand-in's split-K matmul reduces in racing order.
      {PROG_GEMM, "--lt", 1, "\n      cublasLtMatmul\n"},
      // The stand-in's default backend engine for this graph is a racing one.
      {PROG_CONV_BACKEND, "", 1, "\n      cudnnBackendExecute\n"},
      // The weight gradients race; the dropout descriptor's states are taken as recorded.
      {PROG_LSTM_TRAIN, "", 1, "\n      cudnnRNNBackwardWeights_v8\n"},
      {PROG_CURAND_SAMPLE, "", 0, "identical in 4 repeats"},
      // Four threads, each with its own streams, events and allocations.
      {PROG_THREAD_STREAMS, "", 0, "identical in 4 repeats"},
      // Kernels reading through device pointers held in device memory.
      {PROG_POINTER_ROWS, "", 0, "identical in 4 repeats"},
      {PROG_STREAMS_GRAPHS, "", 2,
       "(cuGraphLaunch) cannot be replayed in a window: a CUDA graph launch is not replayed"},
  };
  for (const Case& c : cases) {
    const RunResult replayed = WholeRunReplayed(dir.path(), c.program, c.args);
    INFO(c.program << " " << c.args << "\n" << replayed.out << replayed.err);
    CHECK(replayed.status == c.status);
    CHECK(Contains(c.status == 2 ? replayed.err : replayed.out, c.expected));
  }
  const RunResult lstm = WholeRunReplayed(dir.path(), PROG_LSTM_TRAIN, "");
  CHECK(Contains(lstm.out, "(cudnnSetDropoutDescriptor)"));
  CHECK(Contains(lstm.out, "taken as recorded"));
}

}  // namespace
