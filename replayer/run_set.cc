#include "replayer/run_set.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "formats/trace_reader.h"
#include "replayer/diff_report.h"
#include "replayer/op_multiset.h"

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

// The companions of the trace at `path` in its directory (PATH.rank<R>, PATH.<pid>, ...),
// sorted.
std::vector<std::string> Companions(const std::string& path) {
  std::error_code error;
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
  return companions;
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
  for (const std::string& companion : Companions(path)) {
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
  for (const std::string& companion : Companions(path)) fs::remove(companion, error);
}

const std::pair<std::string, DiffReport>* RunDiff::first_diverged() const {
  const std::pair<std::string, DiffReport>* first = nullptr;
  for (const auto& process : processes) {
    if (process.second.identical()) continue;
    const auto& d = process.second.first_divergence;
    if (!d || d->from_process.empty()) return &process;
    if (first == nullptr) first = &process;
  }
  return first;
}

namespace {

bool Unranked(const ProcessTrace& process) {
  return process.key.rfind("process ", 0) == 0;
}

// What a process did, to tell it among its run's processes: `structure` hashes its ops' kinds,
// names and numeric arguments (sizes, shapes; not pointers), `data` also the digests of what its
// copies and PyTorch ops read and wrote. Each op is hashed alone and the hashes summed: the
// order in which a process's threads' records reach its file varies from run to run (a
// DataLoader worker's queue thread and its main thread), what each op did does not.
struct Signature {
  size_t structure = 0;
  size_t data = 0;
};

Signature SignatureOf(const std::string& path) {
  Signature signature;
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return signature;
  (*reader)->PassOver(~format::RecordTypeBit<format::OpRecord>());
  const auto mix = [](size_t* into, size_t value) {
    *into ^= value + 0x9e3779b97f4a7c15ULL + (*into << 6) + (*into >> 2);
  };
  const auto finish = [](uint64_t x) {  // splitmix64's finaliser: a sum of these stays spread
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<size_t>(x ^ (x >> 31));
  };
  format::Record record;
  while ((*reader)->Next(&record)) {
    const auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr || format::IsLifecycleOp(*op)) continue;
    size_t shape = std::hash<std::string>{}(op->name) ^ static_cast<size_t>(op->kind);
    for (const format::Argument& argument : op->args) {
      if (argument.name == "clique") continue;  // a hash of a random NCCL unique id
      if (const auto* u = std::get_if<uint64_t>(&argument.value)) mix(&shape, *u);
      if (const auto* i = std::get_if<int64_t>(&argument.value))
        mix(&shape, static_cast<size_t>(*i));
      if (const auto* dims = std::get_if<format::Argument::Dims>(&argument.value)) {
        for (const int64_t d : *dims) mix(&shape, static_cast<size_t>(d));
      }
    }
    size_t data = shape;
    // The data a process was given: its copies, and the tensors its PyTorch ops read and made
    // (a DataLoader worker's samples, which the shim sees on the CPU).
    if (op->kind == format::OpKind::kMemcpy || op->kind == format::OpKind::kFrameworkOp) {
      for (const auto* buffers : {&op->inputs, &op->outputs}) {
        for (const format::BufferDigest& buffer : *buffers) {
          mix(&data, buffer.digest.lo);
          mix(&data, buffer.digest.hi);
        }
      }
    }
    signature.structure += finish(shape);
    signature.data += finish(data);
  }
  return signature;
}

// Processes with neither a rank nor the main trace are keyed by start order ("process N"), and
// the processes a program starts together reach the GPU in varying order: run B's are given
// the keys of run A's that did the same (the same ops, and copies of the same data or PyTorch
// ops on the same tensors), then the same ops, before start order pairs the rest.
void PairUnranked(const std::vector<ProcessTrace>& a, std::vector<ProcessTrace>* b) {
  std::vector<const ProcessTrace*> in_a;
  std::vector<ProcessTrace*> in_b;
  for (const ProcessTrace& process : a) {
    if (Unranked(process)) in_a.push_back(&process);
  }
  for (ProcessTrace& process : *b) {
    if (Unranked(process)) in_b.push_back(&process);
  }
  if (in_a.size() < 2 || in_b.size() < 2) return;
  std::vector<Signature> sig_a, sig_b;
  for (const ProcessTrace* process : in_a) sig_a.push_back(SignatureOf(process->path));
  for (const ProcessTrace* process : in_b) sig_b.push_back(SignatureOf(process->path));
  std::vector<std::string> keys(in_b.size());
  std::vector<bool> taken_a(in_a.size(), false);
  const auto pair = [&](auto same) {
    for (size_t i = 0; i < in_a.size(); ++i) {
      for (size_t j = 0; j < in_b.size() && !taken_a[i]; ++j) {
        if (keys[j].empty() && same(sig_a[i], sig_b[j])) {
          keys[j] = in_a[i]->key;
          taken_a[i] = true;
        }
      }
    }
  };
  pair([](const Signature& x, const Signature& y) {
    return x.structure == y.structure && x.data == y.data;
  });
  pair([](const Signature& x, const Signature& y) { return x.structure == y.structure; });
  pair([](const Signature&, const Signature&) { return true; });
  // Left over when run B has more: keys run A has not.
  size_t next = a.size() + 1;
  for (size_t j = 0; j < in_b.size(); ++j) {
    in_b[j]->key = keys[j].empty() ? "process " + std::to_string(next++) : keys[j];
  }
}

// A pool of worker processes (multiprocessing.Pool, a ProcessPoolExecutor) gives each task to
// whichever worker is free, so a worker's ops vary from run to run while the pool's do not.
// When every process that differs is unranked (keyed by start order) and the unranked processes
// of both runs, taken together, made the same ops on the same data (op_multiset.h), their
// reports are made identical, with a note.
void PoolWorkers(const std::vector<ProcessTrace>& a, const std::vector<ProcessTrace>& b,
                 RunDiff* diff) {
  if (!diff->only_in_a.empty() || !diff->only_in_b.empty()) return;
  std::vector<DiffReport*> differing;
  for (auto& [key, report] : diff->processes) {
    if (report.identical()) continue;
    // A worker a pool terminates (SIGTERM) may leave its trace unclosed; ops it lost would
    // change the multiset.
    if (!report.comparable() || report.refused || report.damaged() ||
        key.rfind("process ", 0) != 0) {
      return;
    }
    differing.push_back(&report);
  }
  if (differing.empty()) return;
  const auto pooled = [](const std::vector<ProcessTrace>& run) -> std::optional<OpMultiset> {
    OpMultiset all;
    for (const ProcessTrace& process : run) {
      if (!Unranked(process)) continue;
      const std::optional<OpMultiset> ops = ContentMultiset(process.path);
      if (!ops) return std::nullopt;
      all += *ops;
    }
    return all;
  };
  const std::optional<OpMultiset> ops_a = pooled(a);
  const std::optional<OpMultiset> ops_b = pooled(b);
  if (!ops_a || !ops_b || !(*ops_a == *ops_b)) return;
  for (DiffReport* report : differing) {
    MarkReordered(report, "the processes started without a rank made the same " +
                              std::to_string(ops_a->ops) +
                              " ops on the same data in both runs, this one other tasks of them "
                              "(work handed to whichever worker process was free: a "
                              "multiprocessing pool): the runs computed the same");
  }
}

}  // namespace

const ProcessTrace* FindLikeProcess(const std::vector<ProcessTrace>& run, const std::string& key,
                                    const std::string& like) {
  const ProcessTrace* by_key = nullptr;
  for (const ProcessTrace& process : run) {
    if (process.key == key) by_key = &process;
  }
  if (key.rfind("process ", 0) != 0) return by_key;
  const Signature wanted = SignatureOf(like);
  const ProcessTrace* same_ops = nullptr;
  for (const ProcessTrace& process : run) {
    if (!Unranked(process)) continue;
    const Signature signature = SignatureOf(process.path);
    if (signature.structure != wanted.structure) continue;
    if (signature.data == wanted.data) return &process;
    if (same_ops == nullptr) same_ops = &process;
  }
  return same_ops != nullptr ? same_ops : by_key;
}

namespace {

// A collective of a trace (an NCCL call other than point-to-point): its op, and its place, the
// same in every rank's trace: its communicator's clique (the hash of its unique id that
// ncclCommInitRank records; else, in older traces, the communicator's id) and how many
// collectives that communicator made before.
struct Collective {
  uint64_t sequence = 0;
  std::pair<uint64_t, uint64_t> place;
};

// The collectives of the trace at `path`, in issue order.
std::vector<Collective> Collectives(const std::string& path) {
  std::vector<std::pair<uint64_t, uint64_t>> calls;  // (sequence, communicator)
  std::map<uint64_t, uint64_t> clique_of;
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return {};
  (*reader)->PassOver(~format::RecordTypeBit<format::OpRecord>());
  format::Record record;
  while ((*reader)->Next(&record)) {
    const auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr) continue;
    const auto unsigned_argument = [&](std::string_view name) -> const uint64_t* {
      const format::Argument* argument = FindArgument(*op, name);
      return argument ? std::get_if<uint64_t>(&argument->value) : nullptr;
    };
    const uint64_t* comm = unsigned_argument("comm");
    if (comm == nullptr) continue;
    if (op->name.starts_with("ncclCommInitRank") || op->name == "ncclCommSplit") {
      if (const uint64_t* clique = unsigned_argument("clique")) clique_of[*comm] = *clique;
    } else if (op->kind == format::OpKind::kNcclCollective && op->name != "ncclSend" &&
               op->name != "ncclRecv") {
      calls.emplace_back(op->sequence, *comm);
    }
  }
  std::sort(calls.begin(), calls.end());
  std::map<uint64_t, uint64_t> made;  // collectives so far, by communicator
  std::vector<Collective> collectives;
  for (const auto& [sequence, comm] : calls) {
    const auto clique = clique_of.find(comm);
    collectives.push_back(
        {sequence, {clique != clique_of.end() ? clique->second : comm, made[comm]++}});
  }
  return collectives;
}

// Run A's traces, read once each for ExplainCollectives.
class CollectiveIndex {
 public:
  // Op `sequence`'s place; nullopt when it is no collective of the trace at `path`.
  std::optional<std::pair<uint64_t, uint64_t>> Place(const std::string& path, uint64_t sequence) {
    for (const Collective& c : Of(path)) {
      if (c.sequence == sequence) return c.place;
    }
    return std::nullopt;
  }
  // The first collective at `place` in the trace at `path`; nullopt when it has none.
  std::optional<uint64_t> At(const std::string& path, std::pair<uint64_t, uint64_t> place) {
    for (const Collective& c : Of(path)) {
      if (c.place == place) return c.sequence;
    }
    return std::nullopt;
  }

 private:
  const std::vector<Collective>& Of(const std::string& path) {
    auto it = read_.find(path);
    if (it == read_.end()) it = read_.emplace(path, Collectives(path)).first;
    return it->second;
  }
  std::map<std::string, std::vector<Collective>> read_;
};

// DiffRuns' second step: collectives whose results differ because another process's data did.
void ExplainCollectives(RunDiff* diff) {
  CollectiveIndex index;
  for (auto& [key, report] : diff->processes) {
    if (!report.first_divergence) continue;
    Divergence& d = *report.first_divergence;
    // Different results from identical inputs, or a call that only moves data whose sender the
    // process's own diff could not find ("another rank").
    if (d.op.kind != format::OpKind::kNcclCollective ||
        (d.klass != DivergenceClass::kNondeterministicOp && d.from_process != "another rank")) {
      continue;
    }
    const auto place = index.Place(report.path_a, d.op.sequence);
    if (!place) continue;
    for (const auto& [other_key, other] : diff->processes) {
      if (&other == &report || !other.first_divergence) continue;
      const Divergence& o = *other.first_divergence;
      const std::optional<uint64_t> part = index.At(other.path_a, *place);
      if (!part) continue;
      // That process's data for this collective already differed: it diverged before its part,
      // or its part received differing inputs.
      const bool before = o.op.sequence < *part;
      if (!before && !(o.op.sequence == *part && o.klass == DivergenceClass::kPropagated)) {
        continue;
      }
      d.klass = DivergenceClass::kPropagated;
      d.from_process = other_key;
      d.what = fmt::format(
          "the collective combines every rank's data, and {}'s already differed: {} diverged "
          "at its op {}{} (this process's own inputs to the collective are identical in both "
          "runs)",
          other_key, other_key, o.op.sequence,
          before ? fmt::format(", before its part of this collective (op {})", *part)
                 : std::string(", its part of this collective"));
      d.hint.reset();
      d.root.reset();
      d.window_begin.reset();
      d.window_end.reset();
      break;
    }
  }
}

}  // namespace

StatusOr<RunDiff> DiffRuns(const std::string& path_a, const std::string& path_b,
                           const DiffOptions& options) {
  StatusOr<std::vector<ProcessTrace>> a = FindProcessTraces(path_a);
  if (!a.ok()) return a.status();
  StatusOr<std::vector<ProcessTrace>> b = FindProcessTraces(path_b);
  if (!b.ok()) return b.status();
  PairUnranked(*a, &*b);
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
  if (diff.processes.size() > 1) ExplainCollectives(&diff);
  PoolWorkers(*a, *b, &diff);
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
