#include "replayer/bisect.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>

#include "formats/trace_reader.h"
#include "replayer/op_compare.h"
#include "replayer/op_replay.h"
#include "replayer/window_replay.h"

namespace ndt::replay {
namespace {

StatusOr<uint64_t> CountOps(const std::string& path) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  uint64_t ops = 0;
  format::Record record;
  while ((*reader)->Next(&record)) {
    if (std::holds_alternative<format::OpRecord>(record)) ++ops;
  }
  return ops;
}

std::string Settings(const BisectRun& run) {
  if (run.capture.rfind("kernel:", 0) == 0) {
    return "the suspect kernel's launches captured for standalone replay";
  }
  if (!run.capture.empty()) return "op " + run.capture + " captured for standalone replay";
  if (!run.digest_window.empty()) return "per-op digests of ops " + run.digest_window;
  if (run.digest_every != 0) return fmt::format("a state digest every {} ops", run.digest_every);
  return "the exit state digest only";
}

using RunWith = std::function<StatusOr<std::string>(BisectRun)>;

// `name` as an fnmatch pattern matching exactly it, in the tracer's NDTRACE_CAPTURE list (whose
// tokens are separated by commas: a comma matches as `?`).
std::string ExactGlob(const std::string& name) {
  std::string glob;
  for (const char c : name) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') {
      glob += std::string("[") + c + "]";
    } else {
      glob += c == ',' ? '?' : c;
    }
  }
  return glob;
}

// The op at `where`'s place in its lane (thread, stream, position among the lane's ops other
// than lifecycle ops, as diff aligns them) in the trace `reader` reads.
std::optional<format::OpRecord> FindInLane(format::TraceReader& reader, const OpLocation& where) {
  LaneKeys lanes;
  std::map<uint64_t, uint64_t> counts;
  format::Record record;
  while (reader.Next(&record)) {
    auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr || IsLifecycleOp(*op)) continue;
    const uint64_t lane = lanes.Key(*op);
    if (lane != where.lane) continue;
    if (counts[lane]++ == where.lane_index) return std::move(*op);
  }
  return std::nullopt;
}

// Step 5 (bisect.h) for the op `d` names, found in the trace at `path`: its confirmation line.
std::string Confirm(const BisectOptions& options, const Divergence& d, const std::string& path,
                    const RunWith& run) {
  const uint64_t sequence = d.op.sequence;
  if (d.klass != DivergenceClass::kNondeterministicOp) {
    return fmt::format(
        "not confirmed: op {}'s divergence is of class {}, not one replaying it alone can show",
        sequence, DivergenceClassName(d.klass));
  }
  StatusOr<std::unique_ptr<format::TraceReader>> found = format::TraceReader::Open(path);
  if (!found.ok()) return "not confirmed: " + found.status().message();
  const std::optional<format::OpRecord> op = (*found)->FindOp(sequence);
  if (!op) return fmt::format("not confirmed: op {} is not in {}", sequence, path);
  if (Status status = CheckReplayable(*op); !status.ok()) {
    return "not confirmed: " + status.message();
  }
  // Captured by name and found again at its place in its lane: where several threads issue
  // work, the capture run numbers its ops in another order (as ConfirmSuspect does).
  const bool api_name = std::all_of(op->name.begin(), op->name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
  BisectRun settings;
  settings.capture = op->kind == format::OpKind::kKernelLaunch ? "kernel:" + ExactGlob(op->name)
                     : api_name                                ? op->name
                                                               : std::to_string(sequence);
  StatusOr<std::string> trace = run(settings);
  if (!trace.ok()) return "not confirmed: the capture run failed: " + trace.status().message();
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(*trace);
  if (!reader.ok()) return "not confirmed: " + reader.status().message();
  const std::optional<format::OpRecord> captured = FindInLane(**reader, d.op);
  if (!captured || captured->name != op->name) {
    return fmt::format(
        "not confirmed: the capture run has {} at op {}'s place (thread {}, stream {}, op #{} "
        "there), not {}",
        captured ? captured->name : "no op", sequence, d.op.thread_id, d.op.stream_id,
        d.op.lane_index, op->name);
  }
  if (Status status = CheckCaptured(*captured); !status.ok()) {
    return "not confirmed: " + status.message();
  }
  OpReplayOptions replay;
  replay.repeat = options.confirm_runs;
  StatusOr<OpReplayReport> report = ReplayOp(**reader, *captured, replay);
  if (!report.ok()) return "not confirmed: replaying it failed: " + report.status().message();
  const AlgorithmRuns& runs = report->algorithms.front();
  if (runs.distinct_outputs > 1) {
    return fmt::format(
        "confirmed: op {} varies when replayed alone ({} distinct outputs in {} runs)", sequence,
        runs.distinct_outputs, runs.runs);
  }
  return fmt::format(
      "not reproduced alone: op {} gave identical outputs in {} runs when replayed alone (it may "
      "race with other work, e.g. on another stream)",
      sequence, runs.runs);
}

// Run A's kernel launches, copies and memsets before the first divergence, as far as a walk
// back along the data needs them: where each is, and which places (allocation, offset) it
// reads and writes.
struct LaunchFacts {
  OpLocation where;
  std::vector<format::DevicePointer> reads;   // pointer parameters to const
  std::vector<format::DevicePointer> writes;  // the others
};

std::vector<LaunchFacts> ReadLaunches(const std::string& path, uint64_t before) {
  constexpr size_t kMaxLaunches = 100000;
  std::vector<LaunchFacts> launches;
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return launches;
  LaneKeys lanes;
  std::map<uint64_t, uint64_t> lane_counts;
  format::Record record;
  while ((*reader)->Next(&record)) {
    const auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr || IsLifecycleOp(*op)) continue;
    const uint64_t lane = lanes.Key(*op);
    const uint64_t index = lane_counts[lane]++;
    if (op->sequence >= before) continue;
    LaunchFacts facts;
    facts.where = {op->sequence, op->thread_id, op->stream_id, index, op->kind, op->name, lane};
    for (const format::Argument& argument : op->args) {
      const auto* pointer = std::get_if<format::DevicePointer>(&argument.value);
      if (pointer == nullptr || pointer->allocation_id == 0) continue;
      if (op->kind == format::OpKind::kMemcpy || op->kind == format::OpKind::kMemset) {
        if (argument.name == "src") facts.reads.push_back(*pointer);
        if (argument.name == "dst") facts.writes.push_back(*pointer);
        continue;
      }
      if (op->kind != format::OpKind::kKernelLaunch || argument.name.rfind("arg", 0) != 0) continue;
      const size_t parameter = std::strtoull(argument.name.c_str() + 3, nullptr, 10);
      (PointerParameterIsConst(op->name, parameter) ? facts.reads : facts.writes)
          .push_back(*pointer);
    }
    if (facts.writes.empty()) continue;
    launches.push_back(std::move(facts));
    if (launches.size() > kMaxLaunches) launches.erase(launches.begin());
  }
  std::sort(launches.begin(), launches.end(), [](const LaunchFacts& a, const LaunchFacts& b) {
    return a.where.sequence < b.where.sequence;
  });
  return launches;
}

// The kernel launch that last wrote `place` before `end` (each place: the last to write exactly
// there, else anywhere in the allocation), looking through device-to-device copies (they move
// data, deterministically) to the launch that wrote their source; null when none did.
const LaunchFacts* WriterOf(const std::vector<LaunchFacts>& launches,
                            std::vector<LaunchFacts>::const_iterator end,
                            format::DevicePointer place) {
  for (int hops = 0; hops < 16; ++hops) {
    const LaunchFacts* exact = nullptr;
    const LaunchFacts* same_allocation = nullptr;
    auto it = std::make_reverse_iterator(end);
    for (; it != launches.rend() && exact == nullptr; ++it) {
      for (const format::DevicePointer& written : it->writes) {
        if (written.allocation_id != place.allocation_id) continue;
        if (written.offset == place.offset) exact = &*it;
        if (same_allocation == nullptr) same_allocation = &*it;
      }
    }
    const LaunchFacts* writer = exact != nullptr ? exact : same_allocation;
    if (writer == nullptr || writer->where.kind == format::OpKind::kKernelLaunch) return writer;
    if (writer->where.kind != format::OpKind::kMemcpy || writer->reads.empty()) return nullptr;
    place = writer->reads.front();
    end = launches.begin() + (writer - launches.data());
  }
  return nullptr;
}

// The launches that last wrote what the launch at `sequence` reads, newest first.
std::vector<OpLocation> WritersOfInputs(const std::vector<LaunchFacts>& launches,
                                        uint64_t sequence) {
  auto self = std::find_if(launches.begin(), launches.end(), [&](const LaunchFacts& facts) {
    return facts.where.sequence == sequence;
  });
  if (self == launches.end()) return {};
  // A kernel whose parameter types say nothing of const-ness reads through every pointer.
  const std::vector<format::DevicePointer>& inputs =
      self->reads.empty() ? self->writes : self->reads;
  std::vector<OpLocation> writers;
  for (const format::DevicePointer& input : inputs) {
    const LaunchFacts* writer = WriterOf(launches, self, input);
    if (writer == nullptr) continue;
    const bool known = std::any_of(writers.begin(), writers.end(), [&](const OpLocation& w) {
      return w.sequence == writer->where.sequence;
    });
    if (!known) writers.push_back(writer->where);
  }
  std::sort(writers.begin(), writers.end(),
            [](const OpLocation& a, const OpLocation& b) { return a.sequence > b.sequence; });
  return writers;
}

// Step 1 of Narrow (bisect.h): records the program with the suspect kernel's launches captured
// and replays the one at the suspect's place alone. Returns the divergence that names it when
// its outputs vary; nullopt (with a step line) otherwise.
std::optional<Divergence> ConfirmSuspect(const BisectOptions& options, const OpLocation& suspect,
                                         const Divergence& found, const RunWith& run,
                                         const std::string& trace_a,
                                         std::vector<std::string>* steps) {
  BisectRun settings;
  settings.capture = "kernel:" + ExactGlob(suspect.name);
  StatusOr<std::string> trace = run(settings);
  if (!trace.ok()) {
    steps->push_back("suspect op " + std::to_string(suspect.sequence) +
                     " not replayed: the capture run failed: " + trace.status().message());
    return std::nullopt;
  }
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(*trace);
  if (!reader.ok()) {
    steps->push_back("suspect not replayed: " + reader.status().message());
    return std::nullopt;
  }
  const std::optional<format::OpRecord> captured = FindInLane(**reader, suspect);
  if (!captured || captured->name != suspect.name) {
    steps->push_back(fmt::format(
        "suspect op {} not replayed: the capture run has {} at its place (thread {}, stream {}, "
        "op #{} there)",
        suspect.sequence, captured ? captured->name : std::string("no op"), suspect.thread_id,
        suspect.stream_id, suspect.lane_index));
    return std::nullopt;
  }
  if (Status status = CheckCaptured(*captured); !status.ok()) {
    steps->push_back(
        fmt::format("suspect op {} not replayed: {}", suspect.sequence, status.message()));
    return std::nullopt;
  }
  OpReplayOptions replay;
  replay.repeat = std::max(options.confirm_runs, 2);
  StatusOr<OpReplayReport> replayed = ReplayOp(**reader, *captured, replay);
  if (!replayed.ok()) {
    steps->push_back(fmt::format("suspect op {} not replayed: {}", suspect.sequence,
                                 replayed.status().message()));
    return std::nullopt;
  }
  const AlgorithmRuns& runs = replayed->algorithms.front();
  if (runs.distinct_outputs <= 1) {
    steps->push_back(fmt::format(
        "suspect op {} gave identical outputs in {} runs when replayed alone from its captured "
        "inputs (it may race with other work, e.g. on another stream)",
        suspect.sequence, runs.runs));
    return std::nullopt;
  }
  steps->push_back(
      fmt::format("suspect op {} varies when replayed alone ({} distinct outputs in "
                  "{} runs from the same captured inputs)",
                  suspect.sequence, runs.distinct_outputs, runs.runs));
  Divergence named;
  named.klass = DivergenceClass::kNondeterministicOp;
  named.op = suspect;
  named.sequence_b = suspect.sequence;
  named.what = "the op gave different results from identical inputs";
  named.evidence.push_back(fmt::format(
      "replayed alone {} times from the inputs it read in a capture run: {} distinct outputs",
      runs.runs, runs.distinct_outputs));
  named.evidence.push_back(fmt::format("its output reached op {} ({}) already different: {}",
                                       found.op.sequence, found.op.name, found.what));
  named.ranges = FindOpRanges(trace_a, suspect.sequence);
  format::OpRecord as_op;
  as_op.kind = suspect.kind;
  as_op.name = suspect.name;
  named.hint = FindFixHint(as_op, DivergenceClass::kNondeterministicOp,
                           named.ranges ? named.ranges->framework_op : "");
  return named;
}

// The window replay step (bisect.h) of ops begin..end: one run records them captured, then
// up to `window_replays` replays of the window from that trace. The divergence of the first op
// whose outputs vary, or nullopt (a step line says why) when none does or the window cannot be
// replayed.
std::optional<DiffReport> ReplayWindowStep(const BisectOptions& options, uint64_t begin,
                                           uint64_t end, const RunWith& run,
                                           const std::function<void(const std::string&)>& progress,
                                           BisectResult* result) {
  BisectRun settings;
  settings.capture = fmt::format("{}-{}", begin, end);
  StatusOr<std::string> trace = run(settings);
  const auto give_up = [&](const std::string& why) {
    result->steps.push_back(
        fmt::format("ops {}..{}: not replayed as a window: {}", begin, end, why));
    progress(result->steps.back());
    return std::nullopt;
  };
  if (!trace.ok()) return give_up("the capture run failed: " + trace.status().message());
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(*trace);
  if (!reader.ok()) return give_up(reader.status().message());
  WindowReplayOptions replay;
  replay.first = begin;
  replay.last = end;
  replay.repeat = std::max(2, options.window_repeat);
  for (int attempt = 0; attempt < options.window_replays; ++attempt) {
    ++result->window_replays;
    progress(
        fmt::format("window replay {}: ops {}..{} of run {}, {} runs of each op, from the "
                    "trace alone",
                    result->window_replays, begin, end, result->runs, replay.repeat));
    StatusOr<WindowReplayReport> replayed = ReplayWindow(**reader, replay);
    if (!replayed.ok()) return give_up(replayed.status().message());
    if (!replayed->first_varying) continue;
    const WindowOpResult& varying = replayed->ops[*replayed->first_varying];
    Divergence d;
    d.klass = DivergenceClass::kNondeterministicOp;
    d.op.sequence = varying.op.sequence;
    d.op.thread_id = varying.op.thread_id;
    d.op.stream_id = varying.op.stream_id;
    d.op.kind = varying.op.kind;
    d.op.name = varying.op.name;
    // Its position in its lane, as diff reports it.
    LaneKeys lanes;
    std::map<uint64_t, uint64_t> counts;
    (*reader)->Rewind();
    format::Record record;
    while ((*reader)->Next(&record)) {
      auto* op = std::get_if<format::OpRecord>(&record);
      if (op == nullptr || IsLifecycleOp(*op)) continue;
      const uint64_t lane = lanes.Key(*op);
      if (op->sequence == d.op.sequence) {
        d.op.lane = lane;
        d.op.lane_index = counts[lane];
        break;
      }
      ++counts[lane];
    }
    d.sequence_b = d.op.sequence;
    d.what = "the op gave different results from identical inputs when its window was replayed";
    d.evidence = replayed->evidence;
    d.hint = replayed->hint;
    DiffReport report;
    report.path_a = *trace;
    report.path_b = fmt::format("its window {}..{} replayed", begin, end);
    report.first_divergence = std::move(d);
    report.divergent_ops = 1;
    report.ops_a = replayed->ops_in_window;
    report.ops_b = replayed->ops.size();
    report.ops_compared = replayed->ops.size();
    result->steps.push_back(fmt::format(
        "ops {}..{} captured in run {} and replayed from the trace alone: op {} ({}) varies", begin,
        end, result->runs, varying.op.sequence, varying.op.name));
    progress(result->steps.back());
    result->found_op = true;
    result->confirmation = fmt::format(
        "confirmed: op {} varies when its window (ops {}..{}) is replayed from the trace ({} "
        "distinct outputs in {} runs)",
        varying.op.sequence, begin, end, varying.runs.distinct_outputs, varying.runs.runs);
    return report;
  }
  return give_up(
      fmt::format("{} window replay{} of {} runs each were identical (it varies only "
                  "with the program around it)",
                  options.window_replays, options.window_replays == 1 ? "" : "s", replay.repeat));
}

// Steps 2-5 (bisect.h) on ops begin..end, recording into `result`.
StatusOr<BisectResult> Search(const BisectOptions& options, uint64_t begin, uint64_t end,
                              const RunWith& run,
                              const std::function<void(const std::string&)>& progress,
                              BisectResult* result) {
  const uint64_t per_window = std::max<uint64_t>(options.digests_per_window, 2);
  bool window_tried = false;
  bool window_known = false;  // a coarser step saw the runs differ in begin..end
  while (true) {
    const uint64_t width = end - begin + 1;
    const bool op_level = width <= options.max_window;
    if (op_level && window_known && options.window_replays > 0 && !window_tried &&
        result->runs < options.max_runs) {
      window_tried = true;
      std::optional<DiffReport> found =
          ReplayWindowStep(options, begin, end, run, progress, result);
      if (found) {
        result->report = std::move(found);
        return *result;
      }
    }
    BisectRun settings;
    if (op_level) {
      settings.digest_window = fmt::format("{}:{}", begin, end);
    } else {
      settings.digest_every = (width + per_window - 1) / per_window;
    }

    // Runs with these digests until two differ.
    std::optional<DiffReport> diverged;
    std::string step_first;
    int step_runs = 0;
    while (step_runs < options.runs_per_step) {
      if (result->runs >= options.max_runs) break;
      StatusOr<std::string> trace = run(settings);
      if (!trace.ok()) return trace.status();
      ++step_runs;
      if (step_runs == 1) {
        step_first = *trace;
        continue;
      }
      StatusOr<DiffReport> diff = DiffTraces(step_first, *trace);
      if (!diff.ok()) return diff.status();
      if (diff->damaged()) return Status::Error(DamageText(*diff));
      if (diff->first_divergence || diff->first_structural || !diff->comparable()) {
        diverged = std::move(diff).value();
        break;
      }
      progress(fmt::format("run {} agrees with run {} ({}): one more run", result->runs,
                           result->runs - step_runs + 1, Settings(settings)));
    }
    if (!diverged) {
      result->stopped_because =
          result->runs >= options.max_runs && step_runs < options.runs_per_step
              ? fmt::format("stopped after --max-runs {} program runs", options.max_runs)
              : fmt::format("{} runs with {} all agreed", step_runs, Settings(settings));
      return *result;
    }
    result->report = diverged;
    if (!diverged->comparable()) {
      result->stopped_because = "the runs are not comparable (their headers differ)";
      return *result;
    }
    if (!diverged->first_divergence) {
      result->stopped_because = "the runs differ in structure, not in data";
      return *result;
    }
    const Divergence& d = *diverged->first_divergence;
    // Per-op digests saw only that op read data that already differed (the op that made it
    // differ wrote memory its digests do not separate from placement, such as a caching
    // allocator's segment): replay the ops up to it from one capture run.
    if (op_level && d.klass == DivergenceClass::kPropagated && options.window_replays > 0 &&
        !window_tried && result->runs < options.max_runs && d.op.sequence > begin) {
      window_tried = true;
      result->steps.push_back(fmt::format("ops {}..{} with {}: op {} read data that already "
                                          "differed, and no digest says where",
                                          begin, end, Settings(settings), d.op.sequence));
      progress(result->steps.back());
      std::optional<DiffReport> found =
          ReplayWindowStep(options, begin, d.op.sequence, run, progress, result);
      if (found) {
        result->report = std::move(found);
        return *result;
      }
    }
    if (d.klass != DivergenceClass::kUncovered) {
      // An op-level finding. A propagated divergence found with state digests only, whose root
      // recorded no digest, is narrowed to the ops between its root and it.
      if (!op_level && d.klass == DivergenceClass::kPropagated && d.window_begin &&
          d.window_end && *d.window_end >= *d.window_begin) {
        progress(fmt::format("ops {}..{}: op {} read data that already differed; window {}..{}",
                             begin, end, d.op.sequence, *d.window_begin, *d.window_end));
        result->steps.push_back(
            fmt::format("ops {}..{} with {}: propagated to op {}, window {}..{}", begin, end,
                        Settings(settings), d.op.sequence, *d.window_begin, *d.window_end));
        begin = *d.window_begin;
        end = *d.window_end;
        window_known = true;
        continue;
      }
      result->steps.push_back(fmt::format("ops {}..{} with {}: op {} ({})", begin, end,
                                          Settings(settings), d.op.sequence,
                                          DivergenceClassName(d.klass)));
      result->found_op = true;
      if (options.confirm_runs > 0) {
        result->confirmation =
            result->runs >= options.max_runs
                ? fmt::format("not confirmed: --max-runs {} program runs reached", options.max_runs)
                : Confirm(options, d, step_first, run);
        progress(result->confirmation);
      }
      return *result;
    }
    const uint64_t new_begin = d.window_begin.value_or(begin);
    const uint64_t new_end = d.window_end.value_or(end);
    result->steps.push_back(fmt::format("ops {}..{} with {}: first difference in ops {}..{}", begin,
                                        end, Settings(settings), new_begin, new_end));
    progress(result->steps.back());
    if (op_level) {
      result->stopped_because = fmt::format(
          "device memory differs after ops {}..{}, but no op in it carried a differing output "
          "digest (an op the tracer does not digest)",
          new_begin, new_end);
      return *result;
    }
    if (new_end < new_begin || new_end - new_begin + 1 >= width) {
      result->stopped_because = "the window did not narrow";
      return *result;
    }
    begin = new_begin;
    end = new_end;
    window_known = true;
  }
}

}  // namespace

int CeilLog2(uint64_t n) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  return bits;
}

StatusOr<BisectResult> Bisect(const BisectOptions& options, const RunProgram& run_program,
                              const std::function<void(const std::string&)>& progress) {
  BisectResult result;
  const RunWith run = [&](BisectRun settings) -> StatusOr<std::string> {
    settings.index = ++result.runs;
    progress(fmt::format("run {}: {}", settings.index, Settings(settings)));
    return run_program(settings);
  };

  StatusOr<std::string> first = run(BisectRun{});
  if (!first.ok()) return first.status();
  StatusOr<uint64_t> ops = CountOps(*first);
  if (!ops.ok()) return ops.status();
  result.ops = *ops;
  if (result.ops == 0) return Status::Error("the program issued no GPU op under the tracer");
  progress(fmt::format("run 1 issued {} ops", result.ops));

  return Search(options, 0, result.ops - 1, run, progress, &result);
}

bool NamesTheOp(const Divergence& divergence) {
  if (divergence.klass == DivergenceClass::kPropagated) return divergence.from_host;
  return divergence.klass != DivergenceClass::kUncovered;
}

StatusOr<NarrowResult> Narrow(const BisectOptions& options, const DiffReport& report,
                              const RunProgram& run_program,
                              const std::function<void(const std::string&)>& progress) {
  NarrowResult result;
  result.report = report;
  if (!report.first_divergence) return result;
  result.named = NamesTheOp(*report.first_divergence);
  if (result.named) return result;
  const RunWith run = [&](BisectRun settings) -> StatusOr<std::string> {
    if (result.runs >= options.max_runs) {
      return Status::Error(fmt::format("{} narrowing runs made", options.max_runs));
    }
    settings.index = ++result.runs;
    progress(fmt::format("narrowing run {}: {}", settings.index, Settings(settings)));
    return run_program(settings);
  };
  // Step 1: from the suspect back along the data (the launches that wrote what it read), each
  // replayed alone, until one varies: a launch that does not vary alone read inputs that
  // already differed.
  const auto walk_back = [&](const Divergence& d) {
    if (!d.root || d.root->kind != format::OpKind::kKernelLaunch) return false;
    const std::vector<LaunchFacts> launches = ReadLaunches(report.path_a, d.op.sequence);
    std::deque<OpLocation> queue{*d.root};
    std::set<uint64_t> tried;
    while (!queue.empty() && result.runs < options.max_runs) {
      const OpLocation suspect = queue.front();
      queue.pop_front();
      if (!tried.insert(suspect.sequence).second) continue;
      std::optional<Divergence> named =
          ConfirmSuspect(options, suspect, d, run, report.path_a, &result.steps);
      progress(result.steps.back());
      if (named) {
        result.report.first_divergence = std::move(named);
        result.named = true;
        return true;
      }
      for (const OpLocation& writer : WritersOfInputs(launches, suspect.sequence)) {
        queue.push_back(writer);
      }
    }
    return false;
  };
  const Divergence first = *report.first_divergence;
  if (walk_back(first)) return result;
  if (!first.window_begin || !first.window_end || *first.window_end < *first.window_begin) {
    result.steps.push_back("no window of ops to digest");
    return result;
  }
  // Step 2: per-op digests (state digests first when the window is wide).
  BisectResult search;
  const RunWith counted = [&](BisectRun settings) -> StatusOr<std::string> {
    StatusOr<std::string> trace = run(settings);
    search.runs = result.runs;
    return trace;
  };
  BisectOptions quiet = options;
  quiet.confirm_runs = 0;
  quiet.window_replays = 0;  // check's narrowing stays with per-op digest runs
  quiet.max_runs = options.max_runs;
  StatusOr<BisectResult> searched =
      Search(quiet, *first.window_begin, *first.window_end, counted, progress, &search);
  if (!searched.ok()) {
    result.steps.push_back("per-op digests not taken: " + searched.status().message());
    return result;
  }
  for (const std::string& step : search.steps) result.steps.push_back(step);
  if (!search.stopped_because.empty()) result.steps.push_back(search.stopped_because);
  if (!search.report || !search.report->first_divergence) return result;
  const Divergence& narrowed = *search.report->first_divergence;
  if (NamesTheOp(narrowed)) {
    result.report = *search.report;
    result.named = true;
    return result;
  }
  if (narrowed.root && (!first.root || narrowed.root->sequence != first.root->sequence)) {
    walk_back(narrowed);
  }
  return result;
}

}  // namespace ndt::replay
