#include "replayer/diff_html.h"

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "formats/trace_reader.h"
#include "replayer/diff_report.h"
#include "replayer/op_compare.h"

namespace ndt::replay {

extern const char kReportPage[];  // report_page/page.html, embedded by CMake

namespace {

constexpr size_t kMaxPolicyDecisions = 2000;
constexpr const char* kDataMarker = "/*NDTRACE_PAGE_DATA*/null";

// JSON inside a <script> element: "</" would end it.
std::string ScriptSafe(std::string json) {
  for (size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 3)) {
    json.replace(at, 2, "<\\/");
  }
  return json;
}

// Run A's policy decisions: what --deterministic or --pin replaced, op by op.
nlohmann::json PolicyDecisions(const std::string& path, std::vector<std::string>* notes) {
  nlohmann::json decisions = nlohmann::json::array();
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) {
    notes->push_back("policy decisions not shown: " + reader.status().message());
    return decisions;
  }
  uint64_t total = 0;
  format::Record record;
  while ((*reader)->Next(&record)) {
    const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record);
    if (decision == nullptr) continue;
    if (total++ >= kMaxPolicyDecisions) continue;
    decisions.push_back({{"op", decision->op_sequence},
                         {"library", decision->library},
                         {"action", decision->action},
                         {"from", decision->from_choice ? ChoiceText(*decision->from_choice) : ""},
                         {"to", decision->to_choice ? ChoiceText(*decision->to_choice) : ""},
                         {"applied", decision->applied}});
  }
  if (total > kMaxPolicyDecisions) {
    notes->push_back(std::to_string(total) + " policy decisions in run A; the first " +
                     std::to_string(kMaxPolicyDecisions) + " are listed");
  }
  return decisions;
}

}  // namespace

void DiffTimeline::Pair(const PairOutcome& outcome) {
  if (entries_.size() >= max_ops_ &&
      (outcome.kind == PairOutcome::Kind::kIdentical || entries_.size() >= max_ops_ + max_ops_ / 4)) {
    ++omitted_;
    return;
  }
  const OpLocation& where = outcome.a != nullptr ? *outcome.a : *outcome.b;
  Entry entry;
  entry.sequence_a = outcome.a != nullptr ? static_cast<int64_t>(outcome.a->sequence) : -1;
  entry.sequence_b = outcome.b != nullptr ? static_cast<int64_t>(outcome.b->sequence) : -1;
  entry.lane_index = where.lane_index;
  entry.kind = outcome.kind;
  entry.klass = outcome.klass;
  const auto [row, added_row] = rows_.try_emplace(where.lane, static_cast<uint32_t>(lanes_.size()));
  if (added_row) lanes_.push_back({where.thread_id, where.stream_id});
  entry.row = row->second;
  auto name = name_ids_.find(where.name);
  if (name == name_ids_.end()) {
    name = name_ids_.emplace(where.name, static_cast<uint32_t>(names_.size())).first;
    names_.push_back(where.name);
  }
  entry.name = name->second;
  if (outcome.size != nullptr) {
    entry.sized = true;
    entry.sum_a = outcome.size->sum_a;
    entry.sum_b = outcome.size->sum_b;
    entry.max_abs_a = outcome.size->max_abs_a;
    entry.max_abs_b = outcome.size->max_abs_b;
  }
  entries_.push_back(entry);
}

std::string RenderDiffHtml(const DiffReport& report, const DiffTimeline& timeline,
                           const PageText& text) {
  std::vector<std::string> notes = text.notes;
  nlohmann::json data;
  data["schema"] = "ndtrace.page/1";
  data["title"] = text.title;
  data["verdict"] = text.verdict;
  data["diff"] = nlohmann::json::parse(RenderDiffJson(report));
  data["first_where"] = nullptr;
  if (report.first_divergence) {
    const OpLocation& op = report.first_divergence->op;
    data["first_where"] = "thread " + format::ThreadLabel(op.thread_id) + ", stream " +
                          format::StreamLabel(op.stream_id);
  }
  nlohmann::json lanes = nlohmann::json::array();
  for (const DiffTimeline::Lane& lane : timeline.lanes()) {
    lanes.push_back("thread " + format::ThreadLabel(lane.thread_id) + " · stream " +
                    format::StreamLabel(lane.stream_id));
  }
  data["lanes"] = std::move(lanes);
  data["names"] = timeline.names();
  // One array per op: [sequence_a, sequence_b, row, lane_index, name, kind, class,
  // |Δ sum|, |Δ max|] — kind 0 identical, 1 diverged, 2 structural; the sizes null when the
  // op recorded no numeric summary. Compact: a page may hold 10^5 of them.
  nlohmann::json ops = nlohmann::json::array();
  for (const DiffTimeline::Entry& e : timeline.entries()) {
    nlohmann::json sum = nullptr, max = nullptr;
    if (e.sized) {
      sum = std::fabs(e.sum_a - e.sum_b);
      max = std::fabs(e.max_abs_a - e.max_abs_b);
    }
    ops.push_back({e.sequence_a, e.sequence_b, e.row, e.lane_index, e.name,
                   static_cast<int>(e.kind), DivergenceClassName(e.klass), sum, max});
  }
  data["ops"] = std::move(ops);
  data["ops_omitted"] = timeline.omitted();
  data["policy"] = PolicyDecisions(report.path_a, &notes);
  data["cost"] = text.cost ? nlohmann::json::parse(RenderCostJson(*text.cost)) : nlohmann::json(nullptr);
  data["notes"] = notes;
  std::string page = kReportPage;
  const size_t marker = page.find(kDataMarker);
  const std::string json =
      ScriptSafe(data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (marker != std::string::npos) page.replace(marker, std::string(kDataMarker).size(), json);
  return page;
}

StatusOr<std::string> DiffPage(const DiffReport& report, const PageText& text,
                               DiffOptions options) {
  DiffTimeline timeline;
  options.observer = &timeline;
  StatusOr<DiffReport> again = DiffTraces(report.path_a, report.path_b, options);
  if (!again.ok()) return again.status();
  return RenderDiffHtml(report, timeline, text);
}

StatusOr<std::string> RunDiffPage(const RunDiff& diff, PageText text) {
  const auto* shown = diff.first_diverged();
  if (shown == nullptr && !diff.processes.empty()) shown = &diff.processes.front();
  if (shown == nullptr) return Status::Error("no process was compared: no page to make");
  if (!diff.single()) {
    text.notes.push_back("process " + shown->first + " is shown; the runs had " +
                         std::to_string(diff.processes.size()) + " processes in both" +
                         (diff.only_in_a.empty() && diff.only_in_b.empty()
                              ? std::string()
                              : ", and " + std::to_string(diff.only_in_a.size()) +
                                    " only in run A, " + std::to_string(diff.only_in_b.size()) +
                                    " only in run B"));
    for (const auto& [key, report] : diff.processes) {
      if (&key == &shown->first) continue;
      text.notes.push_back("process " + key + ": " +
                           (report.identical() ? std::string("identical")
                                               : std::string("differs too (not shown)")));
    }
  }
  return DiffPage(shown->second, text);
}

}  // namespace ndt::replay
