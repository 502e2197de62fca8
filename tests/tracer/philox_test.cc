// PyTorch's RNG state in kernel arguments: a launch whose kernel takes an at::PhiloxCudaState
// records its seed and offset as the op's RNG state, and a forgotten seed is classified as an RNG
// state divergence; in a CUDA graph (philox_dropout --graph), each graph launch records the state
// its replay reads. philox_dropout runs on the stand-in device.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

}  // namespace

TEST_CASE("a PhiloxCudaState argument is recorded as the launch's RNG state", "[philox]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "p.ndt").string();
  REQUIRE(RecordRun(trace, PROG_PHILOX_DROPOUT).status == 0);
  std::vector<OpRecord> launches;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.name.rfind("DropoutLike(", 0) == 0) launches.push_back(op);
  }
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].name == "DropoutLike(at::PhiloxCudaState, float const*, float*, int)");
  for (size_t step = 0; step < launches.size(); ++step) {
    INFO("launch " << step);
    REQUIRE(launches[step].rng.has_value());
    CHECK(launches[step].rng->generator == "philox");
    CHECK(launches[step].rng->seed == 1234);
    CHECK(launches[step].rng->offset == step * 4096);
  }
}

TEST_CASE("check names a forgotten seed as an RNG state divergence at the kernel", "[philox]") {
  ndt::testing::TempDir dir;
  const RunResult seeded = Run("'" NDTRACE_BIN "' check -o '" + (dir / "seeded").string() +
                               "' -- '" PROG_PHILOX_DROPOUT "'");
  CHECK(seeded.status == 0);
  const RunResult unseeded = Run("'" NDTRACE_BIN "' check -o '" + (dir / "unseeded").string() +
                                 "' -- '" PROG_PHILOX_DROPOUT "' --unseeded");
  CHECK(unseeded.status == 1);
  CHECK(unseeded.out.find("error[rng_state]") != std::string::npos);
  CHECK(unseeded.out.find("DropoutLike") != std::string::npos);
}

namespace {

const Argument* FindArg(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

std::optional<uint64_t> UnsignedArg(const OpRecord& op, const std::string& name) {
  const Argument* argument = FindArg(op, name);
  const auto* value = argument != nullptr ? std::get_if<uint64_t>(&argument->value) : nullptr;
  return value != nullptr ? std::optional<uint64_t>(*value) : std::nullopt;
}

// Records `program ARGS` with the stand-in driver's call log in `log`.
RunResult RecordWithLog(const std::string& trace, const std::string& log,
                        const std::string& program, const std::string& args) {
  std::remove(trace.c_str());
  return Run("NDT_STANDIN_LOG='" + log + "' '" NDTRACE_BIN "' record -o '" + trace + "' -- '" +
             program + "' " + args);
}

}  // namespace

TEST_CASE(
    "a CUDA graph's captured Philox launches keep their state pointers, and each graph "
    "launch records the seed and offset its replay reads",
    "[philox]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "g.ndt").string();
  const std::string log = (dir / "driver.log").string();
  const RunResult plain = Run("'" PROG_PHILOX_DROPOUT "' --graph");
  REQUIRE(plain.status == 0);
  const RunResult recorded = RecordWithLog(trace, log, PROG_PHILOX_DROPOUT, "--graph");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  CHECK(recorded.out == plain.out);  // the program's own check of every output passed, too

  std::vector<OpRecord> captured, graph_launches, fills;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.name.rfind("DropoutLike(", 0) == 0) captured.push_back(op);
    if (op.name.rfind("Fill(", 0) == 0) fills.push_back(op);
    if (op.kind == ndt::format::OpKind::kGraphLaunch) graph_launches.push_back(op);
  }
  // Captured: not run, their state words not read (a synchronisation would break the capture).
  REQUIRE(captured.size() == 2);
  const std::optional<uint64_t> graph = UnsignedArg(captured[0], "capturedInto");
  REQUIRE(graph.has_value());
  for (size_t i = 0; i < captured.size(); ++i) {
    INFO("captured launch " << i);
    CHECK(UnsignedArg(captured[i], "capturedInto") == graph);
    REQUIRE(captured[i].rng.has_value());
    CHECK(captured[i].rng->generator == "philox:captured");
    CHECK(captured[i].rng->seed == 0);
    CHECK(captured[i].rng->offset == i * 4096);  // offset_intragraph_
    // The state argument is named, not compared as bytes (its pointers differ between runs).
    const Argument* state = FindArg(captured[i], "arg0");
    REQUIRE(state != nullptr);
    CHECK(std::get<std::string>(state->value) == "at::PhiloxCudaState (see rng)");
    const Argument* in = FindArg(captured[i], "arg1");
    REQUIRE(in != nullptr);
    CHECK(std::holds_alternative<ndt::format::DevicePointer>(in->value));
  }
  CHECK(fills.size() == 4);  // seed and offset before each replay
  REQUIRE(graph_launches.size() == 2);
  for (size_t step = 0; step < graph_launches.size(); ++step) {
    INFO("graph launch " << step);
    const OpRecord& op = graph_launches[step];
    CHECK(op.name == "cuGraphLaunch");
    CHECK(UnsignedArg(op, "graph") == graph);
    REQUIRE(op.rng.has_value());
    CHECK(op.rng->generator == "philox");
    CHECK(op.rng->seed == 1234);
    CHECK(op.rng->offset == step * 2 * 4096);  // the generator advances by the graph's 2 x 4096
    const Argument* intragraph = FindArg(op, "philoxIntragraph");
    REQUIRE(intragraph != nullptr);
    CHECK(std::get<std::string>(intragraph->value) == "0,4096");
  }
  // The words were read just before each replay, through the real driver: the launch stream
  // synchronised, then each word copied.
  const std::vector<std::string> calls = Lines(Slurp(log));
  size_t graph_launch_calls = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i] != "cuGraphLaunch") continue;
    ++graph_launch_calls;
    REQUIRE(i >= 4);
    CHECK(std::vector<std::string>(calls.begin() + i - 4, calls.begin() + i) ==
          std::vector<std::string>{"cuStreamSynchronize", "cuMemcpyDtoH_v2", "cuStreamSynchronize",
                                   "cuMemcpyDtoH_v2"});
  }
  CHECK(graph_launch_calls == 2);
}

TEST_CASE("a graph without Philox state is launched without a synchronisation or RNG state",
          "[philox]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "s.ndt").string();
  const std::string log = (dir / "driver.log").string();
  const RunResult recorded = RecordWithLog(trace, log, PROG_STREAMS_GRAPHS, "");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  size_t graph_launches = 0;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.kind != ndt::format::OpKind::kGraphLaunch) continue;
    ++graph_launches;
    CHECK_FALSE(op.rng.has_value());
    CHECK(FindArg(op, "philoxIntragraph") == nullptr);
  }
  CHECK(graph_launches == 3);
  const std::vector<std::string> calls = Lines(Slurp(log));
  for (size_t i = 1; i < calls.size(); ++i) {
    if (calls[i] != "cuGraphLaunch") continue;
    CHECK(calls[i - 1] != "cuMemcpyDtoH_v2");
    CHECK(calls[i - 1] != "cuStreamSynchronize");
  }
}

TEST_CASE(
    "check finds a seeded CUDA graph replay deterministic and names a forgotten seed as "
    "an RNG state divergence at the graph launch",
    "[philox]") {
  ndt::testing::TempDir dir;
  const RunResult seeded = Run("'" NDTRACE_BIN "' check -o '" + (dir / "seeded").string() +
                               "' -- '" PROG_PHILOX_DROPOUT "' --graph");
  INFO(seeded.out << seeded.err);
  CHECK(seeded.status == 0);
  const RunResult unseeded = Run("'" NDTRACE_BIN "' check -o '" + (dir / "unseeded").string() +
                                 "' -- '" PROG_PHILOX_DROPOUT "' --graph --unseeded");
  INFO(unseeded.out << unseeded.err);
  CHECK(unseeded.status == 1);
  // The first divergence is the graph launch's RNG state: the report's first lines name it.
  const std::vector<std::string> lines = Lines(unseeded.out);
  const auto first = std::find_if(lines.begin(), lines.end(), [](const std::string& line) {
    return line.rfind("error[", 0) == 0;
  });
  REQUIRE(first != lines.end());
  CHECK_THAT(*first, Catch::StartsWith("error[rng_state]: op ") &&
                         Catch::EndsWith("consumed different random state"));
  REQUIRE(lines.end() - first > 3);
  CHECK_THAT(first[1], Catch::Contains("graph_launch"));
  CHECK(first[2] == "      cuGraphLaunch");
  CHECK_THAT(first[3], Catch::Contains("different random-number-generator state"));
  CHECK_THAT(unseeded.out, Catch::Contains("NOT deterministic") &&
                               Catch::Contains("(rng_state; cuGraphLaunch; random ops replayed in "
                                               "a CUDA graph"));
  // The kernel that wrote the seed word took the seed by value: a structural note, not the
  // verdict.
  CHECK(Contains(unseeded.out,
                 "note: the runs differ in structure: the same op with different "
                 "arguments"));
  CHECK(Contains(unseeded.out, "CUDA graph"));
  CHECK(Contains(unseeded.out, "torch.manual_seed"));
}
