// The Python stack of a report's op: which frame a report names, how diff finds a stack a trace
// holds, FindPythonStack's lane lookup, and the text and JSON reports that carry it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/trace_writer.h"
#include "replayer/diff_report.h"
#include "replayer/python_stacks.h"
#include "replayer/trace_diff.h"
#include "support/sample_records.h"
#include "support/temp_dir.h"

namespace ndt::replay {
namespace {

using format::OpKind;
using format::OpRecord;
using format::PythonFrame;
using format::PythonStackRecord;
using format::PythonStackStatus;
using format::Record;
using testing::TempDir;

TEST_CASE("library Python files are told from the user's own", "[formats]") {
  for (const char* file :
       {"/usr/lib/python3.11/threading.py", "/root/.pyenv/versions/3.12.1/lib/python3.12/a.py",
        "/opt/venv/lib64/python3.10/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3/dist-packages/torch/functional.py", "<frozen runpy>", "<string>", ""}) {
    INFO(file);
    CHECK(format::IsLibraryPythonFile(file));
  }
  for (const char* file : {"train.py", "/home/me/lib/model.py", "/srv/python3/train.py",
                           "/home/me/lib/pythonic/x.py", "/work/libpython3/run.py"}) {
    INFO(file);
    CHECK_FALSE(format::IsLibraryPythonFile(file));
  }
}

PythonStackRecord Stack() {
  PythonStackRecord stack;
  stack.op_sequence = 3;
  stack.thread_id = 1;
  stack.python = "3.11.2";
  stack.frames = {{"/usr/lib/python3/dist-packages/torch/nn/functional.py", 2000, "linear"},
                  {"/home/me/model.py", 42, "forward"},
                  {"/home/me/train.py", 7, "main"}};
  return stack;
}

TEST_CASE("a report names the innermost frame in the user's own files", "[formats]") {
  PythonStackRecord stack = Stack();
  REQUIRE(format::UserPythonFrame(stack) != nullptr);
  CHECK(format::PythonStackSummary(stack) == "/home/me/model.py:42 in forward");
  stack.frames.erase(stack.frames.begin() + 1, stack.frames.end());  // library frames only
  CHECK(format::PythonStackSummary(stack) ==
        "/usr/lib/python3/dist-packages/torch/nn/functional.py:2000 in linear");
  PythonStackRecord native;
  native.status = PythonStackStatus::kNativeThread;
  native.detail = "the op was issued by a native thread";
  CHECK(format::UserPythonFrame(native) == nullptr);
  CHECK(format::PythonStackSummary(native) ==
        "no Python stack: the op was issued by a native thread");
}

// Two threads' ops; thread 1 uses streams 7 then 5; op 3 (its second op on stream 5) diverges.
std::vector<Record> Program(bool diverge, bool with_stack) {
  std::vector<Record> records;
  const auto op = [&](uint64_t sequence, uint32_t thread, uint32_t stream, const char* name,
                      uint64_t digest) {
    OpRecord o;
    o.sequence = sequence;
    o.thread_id = thread;
    o.stream_id = stream;
    o.kind = OpKind::kCublasGemm;
    o.name = name;
    format::BufferDigest out;
    out.role = "C";
    out.pointer = {thread << 8 | 1, 0, 0};
    out.bytes = 64;
    out.digest = {digest, digest};
    o.outputs = {out};
    records.push_back(o);
  };
  op(0, 1, 7, "cublasSgemm_v2", 10);
  op(1, 0, 0, "cublasSgemm_v2", 11);
  op(2, 1, 5, "cublasSgemm_v2", 12);
  op(3, 1, 5, "cublasSgemmEx", diverge ? 99 : 13);
  if (with_stack) {
    PythonStackRecord stack = Stack();
    stack.lane_stream = 1;
    stack.lane_index = 1;
    records.push_back(stack);
  }
  op(4, 0, 0, "cublasSgemm_v2", 14);
  return records;
}

TEST_CASE("diff shows the Python stack run A holds for the divergent op, in text and JSON",
          "[replayer]") {
  TempDir dir;
  const std::string a = testing::WriteTrace(dir, "a.ndt", Program(false, true));
  const std::string b = testing::WriteTrace(dir, "b.ndt", Program(true, false));
  StatusOr<DiffReport> report = DiffTraces(a, b);
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence.has_value());
  const Divergence& d = *report->first_divergence;
  CHECK(d.op.sequence == 3);
  REQUIRE(d.python_stack.has_value());
  CHECK(d.python_stack_trace == a);
  const std::string text = RenderDiffText(*report);
  CHECK_THAT(text, Catch::Contains("   = python: /home/me/model.py:42 in forward\n"));
  CHECK_THAT(text, Catch::Contains("functional.py:2000 in linear  [library]"));
  const auto j = nlohmann::json::parse(RenderDiffJson(*report));
  const auto& stack = j.at("first_divergence").at("python_stack");
  CHECK(stack.at("status") == "captured");
  CHECK(stack.at("location").at("file") == "/home/me/model.py");
  CHECK(stack.at("location").at("line") == 42);
  CHECK(stack.at("location").at("function") == "forward");
  CHECK(stack.at("frames").size() == 3);
  CHECK(stack.at("frames").at(0).at("library") == true);
  CHECK(stack.at("trace") == a);
  CHECK(j.at("first_divergence").at("root_python_stack").is_null());

  // Run B holds none: swapped, the report has none either.
  StatusOr<DiffReport> swapped = DiffTraces(b, a);
  REQUIRE(swapped.ok());
  REQUIRE(swapped->first_divergence.has_value());
  CHECK_FALSE(swapped->first_divergence->python_stack.has_value());
  CHECK(nlohmann::json::parse(RenderDiffJson(*swapped))
            .at("first_divergence")
            .at("python_stack")
            .is_null());
}

TEST_CASE("FindPythonStack finds a stack by the op's place in its lane, not its sequence",
          "[replayer]") {
  TempDir dir;
  StatusOr<DiffReport> report = DiffTraces(testing::WriteTrace(dir, "a.ndt", Program(false, false)),
                                           testing::WriteTrace(dir, "b.ndt", Program(true, false)));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence.has_value());
  const OpLocation op = report->first_divergence->op;
  CHECK(PythonStackPlace(op) == "1:1:1");  // thread 1, its second stream, that lane's op #1

  // Another run of the same program: op 3 is op 5 there (thread 0 went first), same place.
  std::vector<Record> other = Program(false, true);
  std::get<OpRecord>(other[0]).sequence = 2;
  std::get<OpRecord>(other[1]).sequence = 0;
  std::get<OpRecord>(other[2]).sequence = 4;
  std::get<OpRecord>(other[3]).sequence = 5;
  std::get<PythonStackRecord>(other[4]).op_sequence = 5;
  StatusOr<std::optional<PythonStackRecord>> found =
      FindPythonStack(testing::WriteTrace(dir, "c.ndt", other), op);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK(format::PythonStackSummary(**found) == "/home/me/model.py:42 in forward");

  // A run that went another way: the op at that place is another one.
  std::vector<Record> changed = Program(false, true);
  std::get<OpRecord>(changed[3]).name = "cublasDgemm_v2";
  StatusOr<std::optional<PythonStackRecord>> refused =
      FindPythonStack(testing::WriteTrace(dir, "d.ndt", changed), op);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("not cublasSgemmEx"));

  // No stack taken: none found, no error.
  StatusOr<std::optional<PythonStackRecord>> none =
      FindPythonStack(testing::WriteTrace(dir, "e.ndt", Program(false, false)), op);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
}

}  // namespace
}  // namespace ndt::replay
