#include "replayer/bisect.h"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "formats/trace_reader.h"
#include "replayer/op_replay.h"

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
  if (!run.capture.empty()) return "op " + run.capture + " captured for standalone replay";
  if (!run.digest_window.empty()) return "per-op digests of ops " + run.digest_window;
  if (run.digest_every != 0) return fmt::format("a state digest every {} ops", run.digest_every);
  return "the exit state digest only";
}

using RunWith = std::function<StatusOr<std::string>(BisectRun)>;

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
  BisectRun settings;
  settings.capture = std::to_string(sequence);
  StatusOr<std::string> trace = run(settings);
  if (!trace.ok()) return "not confirmed: the capture run failed: " + trace.status().message();
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(*trace);
  if (!reader.ok()) return "not confirmed: " + reader.status().message();
  const std::optional<format::OpRecord> captured = (*reader)->FindOp(sequence);
  if (!captured || captured->name != op->name) {
    return fmt::format("not confirmed: op {} of the capture run is {}, not {}", sequence,
                       captured ? captured->name : "missing", op->name);
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

  uint64_t begin = 0;
  uint64_t end = result.ops - 1;
  const uint64_t per_window = std::max<uint64_t>(options.digests_per_window, 2);
  while (true) {
    const uint64_t width = end - begin + 1;
    const bool op_level = width <= options.max_window;
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
      if (result.runs >= options.max_runs) break;
      StatusOr<std::string> trace = run(settings);
      if (!trace.ok()) return trace.status();
      ++step_runs;
      if (step_runs == 1) {
        step_first = *trace;
        continue;
      }
      StatusOr<DiffReport> diff = DiffTraces(step_first, *trace);
      if (!diff.ok()) return diff.status();
      if (diff->first_divergence || diff->first_structural || !diff->comparable()) {
        diverged = std::move(diff).value();
        break;
      }
      progress(fmt::format("run {} agrees with run {} ({}): one more run",
                           result.runs, result.runs - step_runs + 1, Settings(settings)));
    }
    if (!diverged) {
      result.stopped_because =
          result.runs >= options.max_runs && step_runs < options.runs_per_step
              ? fmt::format("stopped after --max-runs {} program runs", options.max_runs)
              : fmt::format("{} runs with {} all agreed", step_runs, Settings(settings));
      return result;
    }
    result.report = diverged;
    if (!diverged->comparable()) {
      result.stopped_because = "the runs are not comparable (their headers differ)";
      return result;
    }
    if (!diverged->first_divergence) {
      result.stopped_because = "the runs differ in structure, not in data";
      return result;
    }
    const Divergence& d = *diverged->first_divergence;
    if (d.klass != DivergenceClass::kUncovered) {
      // An op-level finding. A propagated divergence found with state digests only, whose root
      // recorded no digest, is narrowed to the ops between its root and it.
      if (!op_level && d.klass == DivergenceClass::kPropagated && d.window_begin &&
          d.window_end && *d.window_end >= *d.window_begin) {
        progress(fmt::format("ops {}..{}: op {} read data that already differed; window {}..{}",
                             begin, end, d.op.sequence, *d.window_begin, *d.window_end));
        result.steps.push_back(fmt::format("ops {}..{} with {}: propagated to op {}, window {}..{}",
                                           begin, end, Settings(settings), d.op.sequence,
                                           *d.window_begin, *d.window_end));
        begin = *d.window_begin;
        end = *d.window_end;
        continue;
      }
      result.steps.push_back(fmt::format("ops {}..{} with {}: op {} ({})", begin, end,
                                         Settings(settings), d.op.sequence,
                                         DivergenceClassName(d.klass)));
      result.found_op = true;
      if (options.confirm_runs > 0) {
        result.confirmation =
            result.runs >= options.max_runs
                ? fmt::format("not confirmed: --max-runs {} program runs reached", options.max_runs)
                : Confirm(options, d, step_first, run);
        progress(result.confirmation);
      }
      return result;
    }
    const uint64_t new_begin = d.window_begin.value_or(begin);
    const uint64_t new_end = d.window_end.value_or(end);
    result.steps.push_back(fmt::format("ops {}..{} with {}: first difference in ops {}..{}", begin,
                                       end, Settings(settings), new_begin, new_end));
    progress(result.steps.back());
    if (op_level) {
      result.stopped_because = fmt::format(
          "device memory differs after ops {}..{}, but no op in it carried a differing output "
          "digest (an op the tracer does not digest)",
          new_begin, new_end);
      return result;
    }
    if (new_end < new_begin || new_end - new_begin + 1 >= width) {
      result.stopped_because = "the window did not narrow";
      return result;
    }
    begin = new_begin;
    end = new_end;
  }
}

}  // namespace ndt::replay
