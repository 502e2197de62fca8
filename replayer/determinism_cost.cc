#include "replayer/determinism_cost.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "replayer/op_compare.h"

namespace ndt::replay {
namespace {

using Place = std::pair<uint64_t, uint64_t>;  // (lane key, position in the lane)

// The op whose GPU time an activity is: the library op it ran in, else its own.
std::optional<uint64_t> Owner(const format::GpuActivityRecord& activity) {
  return activity.library_op_sequence ? activity.library_op_sequence : activity.op_sequence;
}

uint64_t Duration(const format::GpuActivityRecord& activity) {
  return activity.end_ns > activity.start_ns ? activity.end_ns - activity.start_ns : 0;
}

// Reads `path` once, calling `op(op, place)` for every compared op and `activity(a)` for every
// GPU activity.
template <typename OnOp, typename OnActivity>
Status Stream(const std::string& path, OnOp on_op, OnActivity on_activity) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  LaneKeys lanes;
  std::unordered_map<uint64_t, uint64_t> next_index;  // lane key -> ops seen
  format::Record record;
  while ((*reader)->Next(&record)) {
    if (const auto* op = std::get_if<format::OpRecord>(&record)) {
      if (IsLifecycleOp(*op)) continue;
      const uint64_t lane = lanes.Key(*op);
      on_op(*op, Place{lane, next_index[lane]++});
    } else if (const auto* activity = std::get_if<format::GpuActivityRecord>(&record)) {
      on_activity(*activity);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DeterminismCost> MeasureDeterminismCost(const std::string& policy_trace,
                                                 const std::string& plain_trace) {
  DeterminismCost cost;
  // The policy run: which ops it replaced (decisions with a choice, applied), and its GPU time.
  std::set<uint64_t> replaced;
  uint64_t policy_activities = 0;
  {
    StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(policy_trace);
    if (!reader.ok()) return reader.status();
    format::Record record;
    while ((*reader)->Next(&record)) {
      const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record);
      if (decision != nullptr && decision->applied && decision->to_choice) {
        replaced.insert(decision->op_sequence);
      }
    }
  }
  std::map<uint64_t, std::pair<Place, std::string>> replaced_ops;  // sequence -> place, name
  std::unordered_map<uint64_t, uint64_t> policy_ns;                // replaced op -> GPU ns
  NDT_RETURN_IF_ERROR(Stream(
      policy_trace,
      [&](const format::OpRecord& op, const Place& place) {
        if (replaced.count(op.sequence)) replaced_ops[op.sequence] = {place, op.name};
      },
      [&](const format::GpuActivityRecord& activity) {
        ++policy_activities;
        cost.policy_total_ns += Duration(activity);
        const std::optional<uint64_t> owner = Owner(activity);
        if (owner && replaced.count(*owner)) policy_ns[*owner] += Duration(activity);
      }));
  // The plain run: the ops at the replaced ops' places, and its GPU time.
  std::map<Place, uint64_t> wanted;  // place -> replaced op (policy run)
  for (const auto& [sequence, entry] : replaced_ops) wanted[entry.first] = sequence;
  std::unordered_map<uint64_t, uint64_t> counterpart;  // plain op -> replaced op
  std::unordered_map<uint64_t, uint64_t> plain_ns;     // replaced op -> GPU ns in the plain run
  uint64_t plain_activities = 0;
  NDT_RETURN_IF_ERROR(Stream(
      plain_trace,
      [&](const format::OpRecord& op, const Place& place) {
        const auto it = wanted.find(place);
        if (it != wanted.end() && replaced_ops[it->second].second == op.name) {
          counterpart[op.sequence] = it->second;
        }
      },
      [&](const format::GpuActivityRecord& activity) {
        ++plain_activities;
        cost.plain_total_ns += Duration(activity);
        const std::optional<uint64_t> owner = Owner(activity);
        if (!owner) return;
        // An activity may come before its op in the file: keyed by the plain op, resolved below.
        plain_ns[*owner] += Duration(activity);
      }));
  if (policy_activities == 0 || plain_activities == 0) {
    cost.why_not = "the runs have no GPU times (no CUPTI, or --no-gpu-time)";
    return cost;
  }
  cost.measured = true;
  std::map<std::string, size_t> line_of;
  std::set<uint64_t> matched;
  for (const auto& [plain_op, replaced_op] : counterpart) {
    const auto ns = plain_ns.find(plain_op);
    const std::string& name = replaced_ops[replaced_op].second;
    auto [it, added] = line_of.try_emplace(name, cost.replaced.size());
    if (added) cost.replaced.push_back({name});
    CostLine& line = cost.replaced[it->second];
    ++line.ops;
    line.plain_ns += ns != plain_ns.end() ? ns->second : 0;
    line.policy_ns += policy_ns.count(replaced_op) ? policy_ns[replaced_op] : 0;
    matched.insert(replaced_op);
  }
  cost.unmatched = replaced_ops.size() - matched.size();
  return cost;
}

std::string ChangeText(uint64_t before, uint64_t after) {
  if (before == 0) return "n/a";
  const double change = 100.0 * (static_cast<double>(after) - static_cast<double>(before)) /
                        static_cast<double>(before);
  if (std::fabs(change) < 0.5) return "±0 %";
  return fmt::format("{:+.0f} %", change);
}

std::string RenderCostJson(const DeterminismCost& cost) {
  nlohmann::json lines = nlohmann::json::array();
  for (const CostLine& line : cost.replaced) {
    lines.push_back({{"name", line.name},
                     {"ops", line.ops},
                     {"plain_ns", line.plain_ns},
                     {"policy_ns", line.policy_ns},
                     {"change", ChangeText(line.plain_ns, line.policy_ns)}});
  }
  const nlohmann::json document = {
      {"schema", "ndtrace.cost/1"},
      {"measured", cost.measured},
      {"why_not", cost.why_not},
      {"replaced", std::move(lines)},
      {"unmatched", cost.unmatched},
      {"plain_total_ns", cost.plain_total_ns},
      {"policy_total_ns", cost.policy_total_ns},
      {"total_change", ChangeText(cost.plain_total_ns, cost.policy_total_ns)}};
  return document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string RenderCostText(const DeterminismCost& cost) {
  if (!cost.measured) return "cost of determinism: not measured: " + cost.why_not + "\n";
  const auto ms = [](uint64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); };
  std::string text = "cost of determinism (GPU time, a plain run against one under the policy):\n";
  for (const CostLine& line : cost.replaced) {
    text += fmt::format("  {} ({} replaced op{}): {} -> {} ({})\n", line.name, line.ops,
                        line.ops == 1 ? "" : "s", ms(line.plain_ns), ms(line.policy_ns),
                        ChangeText(line.plain_ns, line.policy_ns));
  }
  if (cost.replaced.empty()) text += "  the policy replaced no op\n";
  if (cost.unmatched != 0) {
    text += fmt::format("  ({} replaced op(s) had no op at their place in the plain run)\n",
                        cost.unmatched);
  }
  text += fmt::format("  whole run: {} -> {} ({})\n", ms(cost.plain_total_ns),
                      ms(cost.policy_total_ns), ChangeText(cost.plain_total_ns, cost.policy_total_ns));
  return text;
}

}  // namespace ndt::replay
