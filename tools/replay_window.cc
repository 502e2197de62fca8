#include "tools/replay_window.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "replayer/fix_hints.h"
#include "replayer/op_replay.h"
#include "replayer/window_replay.h"
#include "tools/cli_support.h"
#include "tools/replay_op.h"

namespace ndt::tools {

namespace {

// The largest op sequence NDTRACE_CAPTURE reads (19 digits).
constexpr uint64_t kCaptureToEnd = 9'999'999'999'999'999'999ull;

std::optional<uint64_t> Number(const std::string& text) {
  if (text.empty() || text.size() > 19 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(text);
}

std::string RunsLine(const replay::WindowOpResult& result) {
  const replay::AlgorithmRuns& runs = result.runs;
  const std::string recorded = runs.runs_matching_recorded < 0
                                   ? "-"
                                   : fmt::format("{}/{}", runs.runs_matching_recorded, runs.runs);
  return fmt::format(
      "  op {:<6} stream {:<8} {:<34} {:<14} {:>9} B  {:>2} distinct  recorded {:>5}  "
      "{:>8.3f} ms  {}{}",
      result.op.sequence, format::StreamLabel(result.op.stream_id), result.op.name,
      result.output_role, result.output_bytes, runs.distinct_outputs, recorded, runs.ms_per_call,
      runs.stable() ? "stable" : "VARIES",
      result.substituted ? fmt::format(" (with {})", runs.name) : "");
}

}  // namespace

std::optional<WindowSpec> ParseWindowSpec(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::optional<uint64_t> first = Number(text.substr(0, colon));
  if (!first) return std::nullopt;
  WindowSpec spec;
  spec.first = *first;
  const std::string rest = text.substr(colon + 1);
  if (rest.empty()) return spec;
  const std::optional<uint64_t> last = Number(rest);
  if (!last || *last < *first) return std::nullopt;
  spec.last = *last;
  return spec;
}

std::string CaptureRange(const WindowSpec& window) {
  return fmt::format("{}-{}", window.first, window.last.value_or(kCaptureToEnd));
}

int RunReplayWindow(const ReplayWindowOptions& options) {
  std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(options.trace);
  if (reader == nullptr) return kExitUsage;
  StatusOr<replay::WindowOps> window =
      replay::ReadWindowOps(*reader, options.window.first, options.window.last);
  if (!window.ok()) {
    PrintError(fmt::format("replay: {}: {}", options.trace, window.status().message()));
    return kExitUsage;
  }
  if (Status status = replay::CheckWindow(*window); !status.ok()) {
    PrintError(fmt::format("replay: {}: {}", options.trace, status.message()));
    return kExitUsage;
  }

  // Replaying runs code from the trace on this machine: only on the GPU and driver it was
  // recorded with, unless forced.
  const uint32_t ordinal = window->ops.front().device_ordinal;
  StatusOr<replay::MachineFacts> machine = replay::QueryMachine(ordinal);
  if (!machine.ok()) {
    PrintError(fmt::format("replay: {}", machine.status().message()));
    return kExitUsage;
  }
  const std::vector<std::string> mismatches =
      replay::MachineMismatches(reader->header(), ordinal, *machine);
  std::string mismatch_text;
  for (const std::string& mismatch : mismatches) {
    mismatch_text += (mismatch_text.empty() ? "" : "; ") + mismatch;
  }
  if (!mismatches.empty() && !options.force) {
    PrintError(fmt::format(
        "replay: {} was recorded on another machine ({}); a trace contains code (module images, "
        "library calls) that replaying runs on this GPU, and it would not show what happened "
        "there; pass --force to replay anyway",
        options.trace, mismatch_text));
    return kExitUsage;
  }
  if (!mismatches.empty()) {
    PrintWarning(fmt::format("replay: forced despite another machine ({})", mismatch_text));
  }

  replay::WindowReplayOptions replay_options;
  replay_options.first = options.window.first;
  replay_options.last = options.window.last;
  replay_options.repeat = options.repeat;
  replay_options.try_deterministic = options.try_deterministic;
  StatusOr<replay::WindowReplayReport> report = replay::ReplayWindow(*reader, replay_options);
  if (!report.ok()) {
    PrintError(fmt::format("replay: {}: {}", options.trace, report.status().message()));
    return kExitUsage;
  }
  const replay::WindowReplayReport& r = *report;

  size_t replayed = 0, applied = 0, ordering = 0, inside = 0;
  std::vector<std::string> as_recorded;
  for (const replay::WindowOpResult& result : r.ops) {
    replayed += result.step == replay::WindowStep::kReplayed;
    applied += result.step == replay::WindowStep::kApplied;
    ordering += result.step == replay::WindowStep::kOrdering;
    inside += result.step == replay::WindowStep::kInside;
    if (result.step == replay::WindowStep::kRecorded) {
      as_recorded.push_back(fmt::format("op {} ({})", result.op.sequence, result.op.name));
    }
  }
  fmt::print(
      "window {}..{} of {}: {} ops, {} runs of each, on {} (compute capability {}.{}, "
      "driver {}){}\n",
      r.first, r.last, options.trace, r.ops_in_window, r.repeat, machine->gpu_name,
      machine->cc_major, machine->cc_minor, machine->driver, mismatches.empty() ? "" : ", forced");
  fmt::print(
      "  replayed {} ops: {} re-executed, {} copies and memsets applied, {} "
      "synchronisation, event and stream ops kept in order{}{}\n",
      r.ops.size(), replayed, applied, ordering,
      inside == 0 ? ""
                  : fmt::format(", {} launched from inside the library calls (re-executed with "
                                "them)",
                                inside),
      as_recorded.empty() ? "" : fmt::format(", {} taken as recorded", as_recorded.size()));
  if (!as_recorded.empty()) {
    std::string list;
    for (size_t i = 0; i < as_recorded.size() && i < 8; ++i) {
      list += (list.empty() ? "" : ", ") + as_recorded[i];
    }
    if (as_recorded.size() > 8) list += fmt::format(" and {} more", as_recorded.size() - 8);
    fmt::print(
        "  not re-executed (what they wrote is read from the trace by the ops after them, "
        "so they cannot be found varying): {}\n",
        list);
  }
  fmt::print(
      "  device memory: {} bytes touched, {} of them the state at op {} read from the "
      "trace\n",
      r.image_bytes, r.bytes_from_trace, r.first);
  for (const replay::WindowOpResult& result : r.ops) {
    if (result.step == replay::WindowStep::kReplayed) fmt::print("{}\n", RunsLine(result));
  }
  if (r.first_varying) {
    const replay::WindowOpResult& v = r.ops[*r.first_varying];
    fmt::print("error[{}]: op {} gives different outputs when the window is replayed\n",
               replay::DivergenceClassName(replay::DivergenceClass::kNondeterministicOp),
               v.op.sequence);
    fmt::print("  --> op {}, thread {}, stream {}\n", v.op.sequence,
               format::ThreadLabel(v.op.thread_id), format::StreamLabel(v.op.stream_id));
    fmt::print("      {}\n", v.op.name);
    if (v.op.algorithm) {
      fmt::print("   = algorithm: {} {}\n", v.op.algorithm->library, v.op.algorithm->name);
    }
    for (const std::string& line : r.evidence) fmt::print("   = {}\n", line);
    if (r.hint) {
      fmt::print("   = why: {}: {}\n", r.hint->framework_op, r.hint->mechanism);
      fmt::print("help: {}\n", r.hint->fix);
    }
  }
  if (r.alternatives) {
    fmt::print("deterministic alternatives of op {}:\n", r.ops[*r.first_varying].op.sequence);
    PrintAlgorithmTable(r.alternatives->algorithms);
    if (!r.alternatives->note.empty()) fmt::print("note: {}\n", r.alternatives->note);
  }
  for (size_t index : r.fixed) {
    fmt::print("fix: op {} ({}) replayed with {}: stable\n", r.ops[index].op.sequence,
               r.ops[index].op.name, r.ops[index].runs.name);
  }
  for (size_t index : r.unfixed) {
    fmt::print("no fix: op {} ({}) has no stable deterministic alternative ndtrace can run\n",
               r.ops[index].op.sequence, r.ops[index].op.name);
  }
  if (r.differing_from_recorded > 0) {
    fmt::print(
        "note: {} stable op{} gave an output other than the recorded one (another GPU, "
        "driver or library, or inputs that already differed)\n",
        r.differing_from_recorded, r.differing_from_recorded == 1 ? "" : "s");
  }
  const double recorded_ms = static_cast<double>(r.recorded_ns) / 1e6;
  fmt::print(
      "  time: {:.3f} ms for {} runs of {} ops ({:.3f} ms per op-run); the window took "
      "{:.3f} ms in the recorded run (its capture included)\n",
      r.replay_ms, r.repeat, r.ops.size(),
      r.ops.empty() ? 0.0 : r.replay_ms / (static_cast<double>(r.ops.size()) * r.repeat),
      recorded_ms);
  if (r.identical()) {
    fmt::print("ndtrace replay: window {}..{} identical in {} repeats ({} ops)\n", r.first, r.last,
               r.repeat, r.ops.size());
    return kExitOk;
  }
  if (options.try_deterministic && r.identical_with_fixes()) {
    fmt::print(
        "ndtrace replay: window {}..{} VARIES at op {}; identical in {} repeats with the "
        "fix{} above\n",
        r.first, r.last, r.ops[*r.first_varying].op.sequence, r.repeat,
        r.fixed.size() == 1 ? "" : "es");
    return kExitFinding;
  }
  fmt::print("ndtrace replay: window {}..{} VARIES at op {} ({} runs)\n", r.first, r.last,
             r.ops[*r.first_varying].op.sequence, r.repeat);
  return kExitFinding;
}

}  // namespace ndt::tools
