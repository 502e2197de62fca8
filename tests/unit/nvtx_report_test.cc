// NVTX ranges in readers: NvtxPaths resolves an op's range id to its path, PyTorch op and
// module; diff names the ranges of the divergent op in its text and JSON reports; fix hints are
// looked up by the aten op before the kernel's name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "formats/nvtx_paths.h"
#include "formats/trace_writer.h"
#include "replayer/diff_report.h"
#include "replayer/fix_hints.h"
#include "replayer/trace_diff.h"
#include "support/sample_records.h"
#include "support/temp_dir.h"

namespace ndt::replay {
namespace {

using format::NvtxEvent;
using format::NvtxPaths;
using format::NvtxRangeRecord;
using format::OpKind;
using format::OpRecord;
using format::Record;

constexpr uint64_t Id(uint32_t thread, uint32_t k) {
  return (uint64_t{thread} << 32) | k;
}

NvtxRangeRecord Push(uint64_t id, uint64_t parent, std::string name, std::string domain = "") {
  NvtxRangeRecord r;
  r.thread_id = static_cast<uint32_t>(id >> 32);
  r.kind = NvtxEvent::kPush;
  r.push = true;
  r.name = std::move(name);
  r.range_id = id;
  r.parent_id = parent;
  r.domain = std::move(domain);
  return r;
}

NvtxRangeRecord Pop(uint64_t id) {
  NvtxRangeRecord r;
  r.thread_id = static_cast<uint32_t>(id >> 32);
  r.kind = NvtxEvent::kPop;
  r.push = false;
  r.range_id = id;
  return r;
}

TEST_CASE("an op's range id resolves to its path, PyTorch op and module", "[formats][nvtx]") {
  NvtxPaths paths;
  paths.Observe(Push(Id(0, 1), 0, "step 3"));
  paths.Observe(Push(Id(0, 2), Id(0, 1), "Net", format::kModuleDomain));
  paths.Observe(Push(Id(0, 3), Id(0, 2), "Net.embed", format::kModuleDomain));
  paths.Observe(Push(Id(0, 4), Id(0, 3), "aten::embedding, seq = 12"));
  paths.Observe(Push(Id(0, 5), Id(0, 4), "aten::index_select, seq = 13"));
  paths.Observe(Push(Id(1, 1), 0, "minilib::scale", "minilib"));

  const format::RangeContext inner = paths.Resolve(Id(0, 5));
  CHECK(inner.path == std::vector<std::string>{"step 3", "Net", "Net.embed",
                                               "aten::embedding, seq = 12",
                                               "aten::index_select, seq = 13"});
  CHECK(inner.framework_op == "aten::index_select");  // the innermost op, ", seq" cut
  CHECK(inner.module == "Net.embed");
  const format::RangeContext other = paths.Resolve(Id(1, 1));
  CHECK(other.path == std::vector<std::string>{"minilib: minilib::scale"});
  CHECK(other.framework_op.empty());  // a library's "ns::name" is not a PyTorch op
  CHECK(paths.Resolve(0).empty());
  CHECK(paths.Resolve(Id(7, 7)).empty());

  // A popped range still resolves for a while (a diff's lanes hold ops read earlier)...
  paths.Observe(Pop(Id(0, 5)));
  CHECK(paths.Resolve(Id(0, 5)).path.size() == 5);
  // ...but memory stays bounded: the oldest closed ranges are forgotten.
  for (uint32_t k = 100; k < 100 + NvtxPaths::kClosedKept; ++k) {
    paths.Observe(Push(Id(2, k), 0, "r"));
    paths.Observe(Pop(Id(2, k)));
  }
  CHECK(paths.Resolve(Id(0, 5)).empty());
  CHECK(paths.Resolve(Id(0, 4)).framework_op == "aten::embedding");  // still open
}

TEST_CASE("the shim's op domain and emit_nvtx's names are PyTorch ops", "[formats][nvtx]") {
  CHECK(NvtxPaths::FrameworkOp("", "aten::add_, seq = 7, sizes = [[2, 2]]") == "aten::add_");
  CHECK(NvtxPaths::FrameworkOp("", "aten::view") == "aten::view");
  CHECK(NvtxPaths::FrameworkOp("", "torchvision::nms, seq = 2") == "torchvision::nms");
  CHECK(NvtxPaths::FrameworkOp(format::kOpDomain, "ndt::device_mm") == "ndt::device_mm");
  CHECK(NvtxPaths::FrameworkOp("", "forward").empty());
  CHECK(NvtxPaths::FrameworkOp("minilib", "aten::add").empty());
}

TEST_CASE("fix hints are looked up by the aten op before the kernel name", "[hints][nvtx]") {
  OpRecord op;
  op.kind = OpKind::kKernelLaunch;
  // A template kernel whose name says nothing about the op that launched it.
  op.name =
      "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, "
      "float, float, at::native::binary_internal::MulFunctor<float>>, "
      "std::array<char*, 2ul>>(int, ...)";
  const auto generic = FindFixHint(op, DivergenceClass::kNondeterministicOp);
  REQUIRE(generic.has_value());
  CHECK_THAT(generic->framework_op, Catch::Contains("not in ndtrace's table"));
  const auto by_op = FindFixHint(op, DivergenceClass::kNondeterministicOp, "aten::index_add_");
  REQUIRE(by_op.has_value());
  CHECK_THAT(by_op->framework_op, Catch::StartsWith("torch.Tensor.index_add_"));
  const auto scatter = FindFixHint(op, DivergenceClass::kNondeterministicOp, "aten::scatter_add_");
  REQUIRE(scatter.has_value());
  CHECK_THAT(scatter->framework_op, Catch::Contains("scatter_add_"));
  // An op the table does not list falls back to the kernel name.
  const auto unknown = FindFixHint(op, DivergenceClass::kNondeterministicOp, "aten::mul");
  REQUIRE(unknown.has_value());
  CHECK(unknown->framework_op == generic->framework_op);
  // A divergence of another class is not the op's own doing: no op-name hint.
  CHECK_FALSE(FindFixHint(op, DivergenceClass::kPropagated, "aten::index_add_").has_value());
  CHECK(FrameworkOpHintCount() > 40);
}

std::vector<Record> Run(uint64_t output_digest) {
  std::vector<Record> records;
  records.push_back(Push(Id(0, 1), 0, "Net", format::kModuleDomain));
  records.push_back(Push(Id(0, 2), Id(0, 1), "Net.embed", format::kModuleDomain));
  records.push_back(Push(Id(0, 3), Id(0, 2), "aten::index_add_, seq = 4"));
  OpRecord op;
  op.sequence = 0;
  op.kind = OpKind::kKernelLaunch;
  op.name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>";
  op.stream_id = 1;
  op.nvtx_range_id = Id(0, 3);
  format::BufferDigest out;
  out.role = "arg0";
  out.pointer = {1, 0, 0x7f0000100000};
  out.bytes = 64;
  out.digest = {output_digest, 1};
  op.outputs = {out};
  records.push_back(op);
  records.push_back(Pop(Id(0, 3)));
  records.push_back(Pop(Id(0, 2)));
  records.push_back(Pop(Id(0, 1)));
  return records;
}

TEST_CASE("diff names the ranges, aten op and module of the divergent op", "[replayer][nvtx]") {
  testing::TempDir dir;
  const std::string a = testing::WriteTrace(dir, "a.ndt", Run(7));
  auto report = DiffTraces(a, testing::WriteTrace(dir, "b.ndt", Run(8)));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence.has_value());
  const Divergence& d = *report->first_divergence;
  REQUIRE(d.ranges.has_value());
  CHECK(d.ranges->framework_op == "aten::index_add_");
  CHECK(d.ranges->module == "Net.embed");
  REQUIRE(d.hint.has_value());
  CHECK_THAT(d.hint->framework_op, Catch::StartsWith("torch.Tensor.index_add_"));  // by op name
  const std::string text = RenderDiffText(*report);
  CHECK_THAT(text, Catch::Contains("   = in: Net > Net.embed > aten::index_add_, seq = 4\n"));
  CHECK_THAT(text, Catch::Contains("   = pytorch: aten::index_add_ in module Net.embed\n"));
  const auto json = nlohmann::json::parse(RenderDiffJson(*report));
  CHECK(json.at("schema") == "ndtrace.diff/2");
  const auto& ranges = json.at("first_divergence").at("ranges");
  CHECK(ranges.at("path").size() == 3);
  CHECK(ranges.at("framework_op") == "aten::index_add_");
  CHECK(ranges.at("module") == "Net.embed");
  const auto found = FindOpRanges(a, 0);
  REQUIRE(found.has_value());
  CHECK(found->module == "Net.embed");
  CHECK_FALSE(FindOpRanges(a, 5).has_value());
}

TEST_CASE("an op in no range has no ranges in the report", "[replayer][nvtx]") {
  testing::TempDir dir;
  auto strip = [](std::vector<Record> records) {
    std::vector<Record> ops;
    for (Record& record : records) {
      if (auto* op = std::get_if<OpRecord>(&record)) {
        op->nvtx_range_id = 0;
        ops.push_back(*op);
      }
    }
    return ops;
  };
  auto report = DiffTraces(testing::WriteTrace(dir, "a.ndt", strip(Run(7))), testing::WriteTrace(dir, "b.ndt", strip(Run(8))));
  REQUIRE(report.ok());
  REQUIRE(report->first_divergence.has_value());
  CHECK_FALSE(report->first_divergence->ranges.has_value());
  CHECK(
      nlohmann::json::parse(RenderDiffJson(*report)).at("first_divergence").at("ranges").is_null());
}

}  // namespace
}  // namespace ndt::replay
