// The HTML page's data: what the diff decided about each pair, bounded, embedded so that no
// string in it can end the page's script.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "replayer/diff_html.h"

namespace ndt::replay {
namespace {

OpLocation Op(uint64_t sequence, uint64_t lane, const std::string& name) {
  OpLocation op;
  op.sequence = sequence;
  op.lane = lane;
  op.thread_id = static_cast<uint32_t>(lane);
  op.lane_index = sequence;
  op.name = name;
  return op;
}

nlohmann::json PageData(const std::string& page) {
  const std::string open = "<script id=\"ndtrace-data\" type=\"application/json\">";
  const size_t begin = page.find(open);
  REQUIRE(begin != std::string::npos);
  const size_t end = page.find("</script>", begin);
  REQUIRE(end != std::string::npos);
  return nlohmann::json::parse(page.substr(begin + open.size(), end - begin - open.size()));
}

TEST_CASE("the timeline keeps every outcome up to its bound, then only differences", "[replayer]") {
  DiffTimeline timeline(4);
  for (uint64_t i = 0; i < 10; ++i) {
    const OpLocation a = Op(i, i % 2, i % 2 ? "gemm" : "memcpy");
    timeline.Pair({PairOutcome::Kind::kIdentical, &a, &a});
  }
  REQUIRE(timeline.entries().size() == 4);
  CHECK(timeline.omitted() == 6);
  CHECK(timeline.lanes().size() == 2);
  CHECK(timeline.names().size() == 2);
  const OpLocation late = Op(20, 0, "atomics");
  const DivergenceSize size{"out", format::DType::kF32, 1.0, 1.5, 2, 2};
  timeline.Pair({PairOutcome::Kind::kDiverged, &late, &late,
                 DivergenceClass::kNondeterministicOp, &size});
  REQUIRE(timeline.entries().size() == 5);  // past the bound, a quarter of it more for differences
  CHECK(timeline.entries()[4].sized);
  CHECK(timeline.entries()[4].kind == PairOutcome::Kind::kDiverged);
  timeline.Pair({PairOutcome::Kind::kStructural, nullptr, &late});  // only in run B: no room
  CHECK(timeline.entries().size() == 5);
  CHECK(timeline.omitted() == 7);
}

TEST_CASE("the page embeds the report so that no text in it ends the script", "[replayer]") {
  DiffReport report;
  report.path_a = "/nonexistent/run-1.ndt";
  report.path_b = "/nonexistent/run-2.ndt";
  Divergence d;
  d.op = Op(7, 1, "kernel</script><script>alert(1)</script>");
  d.what = "a </b> tag";
  report.first_divergence = d;
  DiffTimeline timeline;
  const OpLocation a = d.op;
  timeline.Pair({PairOutcome::Kind::kDiverged, &a, &a, DivergenceClass::kNondeterministicOp});
  const std::string page = RenderDiffHtml(report, timeline, {"title", "NOT deterministic", {}, std::nullopt});
  CHECK(page.find("alert(1)</script>") == std::string::npos);
  const nlohmann::json data = PageData(page);
  CHECK(data["verdict"] == "NOT deterministic");
  CHECK(data["diff"]["first_divergence"]["op"]["name"] == d.op.name);
  CHECK(data["diff"]["first_divergence"]["what"] == "a </b> tag");
  REQUIRE(data["ops"].size() == 1);
  CHECK(data["ops"][0][0] == 7);
  CHECK(data["names"][0] == d.op.name);
  // Run A's trace cannot be read for its policy decisions: the page says so.
  REQUIRE(data["notes"].size() == 1);
  CHECK(data["notes"][0].get<std::string>().find("policy decisions not shown") == 0);
}

}  // namespace
}  // namespace ndt::replay
