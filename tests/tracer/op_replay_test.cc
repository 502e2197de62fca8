// Standalone op replay end to end on the stand-in device: `ndtrace record --capture` stores a
// cuDNN convolution's buffers in the blob stream, and `ndtrace replay TRACE --op N` re-runs it
// alone: the stand-in's racing BWD_FILTER_ALGO_0 varies, its deterministic alternatives and a
// deterministic op do not; uncaptured ops, damaged traces and traces from another GPU are
// refused. Exit codes: 0 stable, 1 varies, 2 error. Stand-in results only.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
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
const std::string kConv = "'" PROG_CONV_LEGACY "'";

RunResult RecordConv(const std::string& trace, const std::string& capture,
                     const std::string& args = "2") {
  std::remove(trace.c_str());
  return Run(kNdtrace + " record --capture " + capture + " -o '" + trace + "' -- " + kConv + " " +
             args);
}

std::vector<OpRecord> Named(const std::vector<Record>& records, const std::string& name) {
  std::vector<OpRecord> ops;
  for (const OpRecord& op : Ops(records)) {
    if (op.name == name) ops.push_back(op);
  }
  return ops;
}

bool HasBlobs(const OpRecord& op) {
  for (const Argument& argument : op.args) {
    if (argument.name.rfind("blob:", 0) == 0) return true;
  }
  return false;
}

TEST_CASE("record --capture stores the chosen convolutions' buffers and only theirs",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  const RunResult recorded = RecordConv(trace, "cudnnConvolutionBackwardFilter");
  INFO(recorded.err);
  REQUIRE(recorded.status == 0);
  const std::vector<Record> records = ReadAll(trace);
  const std::vector<OpRecord> filters = Named(records, "cudnnConvolutionBackwardFilter");
  REQUIRE(filters.size() == 2);
  for (const OpRecord& op : Ops(records)) {
    if (op.name != "cudnnConvolutionBackwardFilter") CHECK_FALSE(HasBlobs(op));
  }
  // The first call has beta = 0 (dw is not read), the second accumulates into dw (beta = 1):
  // what the first wrote is what the second read.
  CHECK(Text(filters[0], "blob:in:dw") == std::nullopt);
  REQUIRE(Text(filters[1], "blob:in:dw"));
  CHECK(Text(filters[1], "blob:in:dw") == Text(filters[0], "blob:out:dw"));
  for (const OpRecord& op : filters) {
    for (const auto& [name, digests] :
         {std::pair{std::string("blob:in:"), &op.inputs}, {"blob:out:", &op.outputs}}) {
      for (const ndt::format::BufferDigest& digest : *digests) {
        const std::optional<std::string> hex = Text(op, name + digest.role);
        REQUIRE(hex);
        CHECK(BlobBytes(trace, *hex).size() == digest.bytes);
      }
    }
  }
  // Fixed inputs: the same bytes, the same content address, in another recording.
  const std::string again = (dir / "again.ndt").string();
  REQUIRE(RecordConv(again, "cudnn_convolution").status == 0);
  const std::vector<Record> again_records = ReadAll(again);
  const std::vector<OpRecord> forwards = Named(again_records, "cudnnConvolutionForward");
  REQUIRE_FALSE(forwards.empty());
  CHECK(HasBlobs(forwards[0]));
  CHECK(Text(Named(again_records, "cudnnConvolutionBackwardFilter")[0], "blob:in:x") ==
        Text(filters[0], "blob:in:x"));
}

TEST_CASE("replay --op shows that a captured BWD_FILTER_ALGO_0 varies alone and that its "
          "deterministic alternatives do not",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  REQUIRE(RecordConv(trace, "cudnnConvolutionBackwardFilter").status == 0);
  const std::vector<OpRecord> filters = Named(ReadAll(trace), "cudnnConvolutionBackwardFilter");
  REQUIRE(filters.size() == 2);
  for (const OpRecord& op : filters) {
    const RunResult replayed = Replay(trace, op.sequence, "--repeat 10");
    INFO(replayed.out << replayed.err);
    CHECK(replayed.status == 1);
    CHECK(Contains(replayed.out, "VARIES on its own: 10 runs of CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0"));
  }
  const RunResult tried = Replay(trace, filters[1].sequence, "--repeat 10 --try-deterministic");
  INFO(tried.out << tried.err);
  CHECK(tried.status == 1);
  std::vector<std::string> stable, varies;
  for (const std::string& line : Lines(tried.out)) {
    if (line.size() < 3 || line[2] < '0' || line[2] > '9') continue;  // algorithm rows only
    (Contains(line, "stable") ? stable : varies).push_back(line);
  }
  REQUIRE(varies.size() >= 1);
  CHECK(Contains(varies[0], "ALGO_0 (recorded)"));
  for (const std::string& line : varies) {
    if (Contains(line, "(recorded)")) continue;
    CHECK(Contains(line, "skipped"));  // a deterministic alternative never varies
  }
  REQUIRE(stable.size() >= 1);
  CHECK(Contains(stable[0], "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 "));
  for (const std::string& line : stable) CHECK(Contains(line, " deterministic "));
  CHECK(Contains(tried.out, "deterministic alternatives with stable output: "
                            "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ("));
}

TEST_CASE("replay --op of a deterministic captured op is stable and reproduces the recorded "
          "output",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  // --algo 1: the backward-filter algorithm is deterministic too.
  REQUIRE(RecordConv(trace, "cudnn_convolution", "--algo 1 2").status == 0);
  const std::vector<Record> records = ReadAll(trace);
  for (const char* name : {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                           "cudnnConvolutionBackwardFilter"}) {
    const std::vector<OpRecord> ops = Named(records, name);
    REQUIRE(ops.size() == 2);
    const RunResult replayed = Replay(trace, ops[1].sequence, "--repeat 5");
    INFO(name << "\n" << replayed.out << replayed.err);
    CHECK(replayed.status == 0);
    CHECK(Contains(replayed.out, "is stable: 5 runs of"));
    CHECK(Contains(replayed.out, " 5/5 "));  // every run equals the recorded output bitwise
  }
}

TEST_CASE("replay --op refuses an uncaptured op, a missing op and a damaged trace",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  REQUIRE(RecordConv(trace, "cudnnConvolutionBackwardFilter").status == 0);
  const std::vector<Record> records = ReadAll(trace);
  const std::vector<OpRecord> forwards = Named(records, "cudnnConvolutionForward");
  REQUIRE_FALSE(forwards.empty());

  const RunResult uncaptured = Replay(trace, forwards[0].sequence);
  CHECK(uncaptured.status == 2);
  CHECK(Contains(uncaptured.err, "error: replay: "));
  CHECK(Contains(uncaptured.err, "was not captured: record it with `ndtrace record --capture " +
                                     std::to_string(forwards[0].sequence)));

  const RunResult missing = Replay(trace, 100000);
  CHECK(missing.status == 2);
  CHECK(Contains(missing.err, "there is no op 100000"));

  const RunResult memcpy_op = Replay(trace, Ops(records).back().sequence);
  CHECK(memcpy_op.status == 2);
  CHECK(Contains(memcpy_op.err, "error: replay: "));

  // A file cut inside its header is no trace.
  const std::string cut = (dir / "cut.ndt").string();
  std::filesystem::copy_file(trace, cut);
  std::filesystem::resize_file(cut, 40);
  const uint64_t op = Named(records, "cudnnConvolutionBackwardFilter")[0].sequence;
  const RunResult cut_replay = Replay(cut, op);
  CHECK(cut_replay.status == 2);
  CHECK(Contains(cut_replay.err, "error: "));

  // A damaged blob: one flipped byte inside the captured x.
  const std::string flipped = (dir / "flipped.ndt").string();
  std::filesystem::copy_file(trace, flipped);
  uint64_t blob_offset = 0;
  {
    auto reader = ndt::format::TraceReader::Open(trace);
    REQUIRE(reader.ok());
    for (const ndt::format::ChunkInfo& chunk : (*reader)->chunks()) {
      if (chunk.kind == ndt::format::ChunkKind::kBlob && blob_offset == 0) {
        blob_offset = chunk.offset + 56 + chunk.compressed_size / 2;
      }
    }
  }
  REQUIRE(blob_offset != 0);
  {
    std::fstream file(flipped, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(blob_offset));
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    file.seekp(static_cast<std::streamoff>(blob_offset));
    file.write(&byte, 1);
  }
  const RunResult damaged = Replay(flipped, op);
  INFO(damaged.out << damaged.err);
  CHECK(damaged.status == 2);
  CHECK(Contains(damaged.err, "error: " + flipped + ": blob chunk: checksum mismatch (bytes "));
  CHECK(Contains(damaged.err, "error: replay: " + flipped + ": damaged trace; not replayed"));
}

TEST_CASE("replay --op refuses a trace recorded on another GPU or driver unless forced",
          "[tracer][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "conv.ndt").string();
  REQUIRE(RecordConv(trace, "cudnnConvolutionBackwardFilter").status == 0);
  const uint64_t op = Named(ReadAll(trace), "cudnnConvolutionBackwardFilter")[0].sequence;

  const std::string other_gpu = (dir / "h200.ndt").string();
  RewriteTrace(
      trace, other_gpu,
      [](ndt::format::TraceHeader* header) {
        REQUIRE_FALSE(header->gpus.empty());
        header->gpus[0].name = "NVIDIA H200";
        header->gpus[0].simulated = false;
      },
      nullptr);
  const RunResult refused = Replay(other_gpu, op, "--repeat 4");
  CHECK(refused.status == 2);
  CHECK(Contains(refused.err, "recorded on another machine (GPU 'NVIDIA H200' in the trace"));
  CHECK(Contains(refused.err, "--force"));
  CHECK(refused.out.empty());

  const RunResult forced = Replay(other_gpu, op, "--repeat 4 --force");
  INFO(forced.out << forced.err);
  CHECK(forced.status == 1);
  CHECK(Contains(forced.err, "warning: replay: forced"));
  CHECK(Contains(forced.out, "VARIES"));

  const std::string other_driver = (dir / "driver.ndt").string();
  RewriteTrace(
      trace, other_driver,
      [](ndt::format::TraceHeader* header) { header->versions.driver = 12080; }, nullptr);
  const RunResult driver = Replay(other_driver, op);
  CHECK(driver.status == 2);
  CHECK(Contains(driver.err, "driver 12080 in the trace"));
}

}  // namespace
