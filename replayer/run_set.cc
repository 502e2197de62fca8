#include "replayer/run_set.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>

#include "formats/trace_reader.h"
#include "replayer/diff_report.h"

namespace ndt::replay {
namespace {

namespace fs = std::filesystem;

// Whether `suffix` is a sequence of ".rank<digits>" or ".<digits>" parts.
bool IsCompanionSuffix(std::string_view suffix) {
  if (suffix.empty()) return false;
  while (!suffix.empty()) {
    if (suffix[0] != '.') return false;
    suffix.remove_prefix(1);
    if (suffix.rfind("rank", 0) == 0) suffix.remove_prefix(4);
    size_t digits = 0;
    while (digits < suffix.size() && std::isdigit(static_cast<unsigned char>(suffix[digits]))) {
      ++digits;
    }
    if (digits == 0) return false;
    suffix.remove_prefix(digits);
  }
  return true;
}

struct Found {
  std::string path;
  bool main = false;
  int32_t rank = -1;
  uint64_t start = 0;
};

StatusOr<Found> Inspect(const std::string& path, bool main) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  Found found;
  found.path = path;
  found.main = main;
  found.rank = (*reader)->header().rank;
  found.start = (*reader)->header().start_unix_ns;
  return found;
}

// Keys and order: main, then one process per rank (the first started) by rank, then the rest
// by start time as "process N".
std::vector<ProcessTrace> Keyed(std::vector<Found> found) {
  std::stable_sort(found.begin(), found.end(),
                   [](const Found& a, const Found& b) { return a.start < b.start; });
  std::vector<ProcessTrace> main, rest;
  std::map<int32_t, ProcessTrace> ranked;
  for (const Found& f : found) {
    if (f.main) {
      main.push_back({"main", f.path});
    } else if (f.rank >= 0 && ranked.count(f.rank) == 0) {
      ranked.emplace(f.rank, ProcessTrace{"rank " + std::to_string(f.rank), f.path});
    } else {
      rest.push_back({"process " + std::to_string(rest.size() + 1), f.path});
    }
  }
  std::vector<ProcessTrace> traces = std::move(main);
  for (auto& [rank, trace] : ranked) traces.push_back(std::move(trace));
  for (auto& trace : rest) traces.push_back(std::move(trace));
  return traces;
}

}  // namespace

StatusOr<std::vector<ProcessTrace>> FindProcessTraces(const std::string& path) {
  std::error_code error;
  std::vector<Found> found;
  if (fs::is_directory(path, error)) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file(error)) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
      StatusOr<Found> inspected = Inspect(file, false);
      if (inspected.ok()) found.push_back(std::move(inspected).value());  // skip non-traces
    }
    if (found.empty()) return Status::Error(path + ": no trace in this directory");
    return Keyed(std::move(found));
  }
  if (fs::exists(path, error)) {
    StatusOr<Found> main = Inspect(path, true);
    if (!main.ok()) return main.status();
    found.push_back(std::move(main).value());
  }
  const fs::path self(path);
  const fs::path directory = self.parent_path().empty() ? fs::path(".") : self.parent_path();
  const std::string base = self.filename().string();
  std::vector<std::string> companions;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > base.size() && name.compare(0, base.size(), base) == 0 &&
        IsCompanionSuffix(std::string_view(name).substr(base.size()))) {
      companions.push_back((directory / name).string());
    }
  }
  std::sort(companions.begin(), companions.end());
  for (const std::string& companion : companions) {
    StatusOr<Found> inspected = Inspect(companion, false);
    if (!inspected.ok()) return inspected.status();
    found.push_back(std::move(inspected).value());
  }
  if (found.empty()) return Status::Error(path + ": cannot open: no such trace");
  return Keyed(std::move(found));
}

bool RunDiff::identical() const {
  return only_in_a.empty() && only_in_b.empty() &&
         std::all_of(processes.begin(), processes.end(),
                     [](const auto& process) { return process.second.identical(); });
}

bool RunDiff::differs_only_at_lane_tails() const {
  if (!only_in_a.empty() || !only_in_b.empty() || identical()) return false;
  return std::all_of(processes.begin(), processes.end(), [](const auto& process) {
    return process.second.identical() || process.second.differs_only_at_lane_tails();
  });
}

uint64_t RunDiff::lane_tail_ops() const {
  uint64_t ops = 0;
  for (const auto& process : processes) ops += process.second.lane_tail_ops;
  return ops;
}

void RemoveProcessTraces(const std::string& path) {
  std::error_code error;
  fs::remove(path, error);
  const fs::path self(path);
  const fs::path directory = self.parent_path().empty() ? fs::path(".") : self.parent_path();
  const std::string base = self.filename().string();
  std::vector<fs::path> companions;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > base.size() && name.compare(0, base.size(), base) == 0 &&
        IsCompanionSuffix(std::string_view(name).substr(base.size()))) {
      companions.push_back(entry.path());
    }
  }
  for (const fs::path& companion : companions) fs::remove(companion, error);
}

const std::pair<std::string, DiffReport>* RunDiff::first_diverged() const {
  for (const auto& process : processes) {
    if (!process.second.identical()) return &process;
  }
  return nullptr;
}

StatusOr<RunDiff> DiffRuns(const std::string& path_a, const std::string& path_b,
                           const DiffOptions& options) {
  StatusOr<std::vector<ProcessTrace>> a = FindProcessTraces(path_a);
  if (!a.ok()) return a.status();
  StatusOr<std::vector<ProcessTrace>> b = FindProcessTraces(path_b);
  if (!b.ok()) return b.status();
  RunDiff diff;
  for (const ProcessTrace& trace_a : *a) {
    auto match = std::find_if(b->begin(), b->end(),
                              [&](const ProcessTrace& t) { return t.key == trace_a.key; });
    if (match == b->end()) {
      diff.only_in_a.push_back(trace_a.key);
      continue;
    }
    StatusOr<DiffReport> report = DiffTraces(trace_a.path, match->path, options);
    if (!report.ok()) return report.status();
    diff.processes.emplace_back(trace_a.key, std::move(report).value());
  }
  for (const ProcessTrace& trace_b : *b) {
    if (std::none_of(a->begin(), a->end(),
                     [&](const ProcessTrace& t) { return t.key == trace_b.key; })) {
      diff.only_in_b.push_back(trace_b.key);
    }
  }
  return diff;
}

std::string RenderRunDiffText(const RunDiff& diff, bool color) {
  if (diff.single()) return RenderDiffText(diff.processes.front().second, color);
  std::string out;
  for (const auto& [key, report] : diff.processes) {
    out += "== " + key + ": " + report.path_a + " vs " + report.path_b + "\n";
    out += RenderDiffText(report, color);
    out += "\n";
  }
  for (const std::string& key : diff.only_in_a) out += "== " + key + ": in run A only\n";
  for (const std::string& key : diff.only_in_b) out += "== " + key + ": in run B only\n";
  size_t diverged = 0;
  for (const auto& process : diff.processes) diverged += process.second.identical() ? 0 : 1;
  out += std::to_string(diff.processes.size()) + " processes compared, " +
         std::to_string(diverged) + " diverged";
  if (!diff.only_in_a.empty() || !diff.only_in_b.empty()) {
    out += ", " + std::to_string(diff.only_in_a.size() + diff.only_in_b.size()) +
           " in one run only";
  }
  out += "\n";
  return out;
}

std::string RenderRunDiffJson(const RunDiff& diff) {
  if (diff.single()) return RenderDiffJson(diff.processes.front().second);
  nlohmann::ordered_json document;
  document["schema"] = "ndtrace.diff-set/1";
  document["identical"] = diff.identical();
  nlohmann::ordered_json processes = nlohmann::ordered_json::array();
  for (const auto& [key, report] : diff.processes) {
    nlohmann::ordered_json process;
    process["process"] = key;
    process["report"] = nlohmann::ordered_json::parse(RenderDiffJson(report));
    processes.push_back(std::move(process));
  }
  document["processes"] = std::move(processes);
  document["only_in_a"] = diff.only_in_a;
  document["only_in_b"] = diff.only_in_b;
  return document.dump(2);
}

}  // namespace ndt::replay
