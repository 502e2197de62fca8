#include "tools/replay_op.h"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "kernels/digest_v1.h"
#include "replayer/op_replay.h"
#include "tools/cli_support.h"

namespace ndt::tools {

namespace {

const char* DeterminismText(format::Determinism determinism) {
  switch (determinism) {
    case format::Determinism::kDeterministic:
      return "deterministic";
    case format::Determinism::kNondeterministic:
      return "nondeterministic";
    case format::Determinism::kUnknown:
      break;
  }
  return "unknown";
}

std::string DiffText(const replay::AlgorithmRuns& runs, double value) {
  return runs.compared_values ? fmt::format("{:.3g}", value) : "-";
}

void PrintRuns(const replay::AlgorithmRuns& runs) {
  const std::string label = fmt::format("{} {}{}", runs.algo, runs.name,
                                        runs.recorded ? " (recorded)" : "");
  if (!runs.skipped.empty()) {
    fmt::print("  {:<52} {:<16} skipped: {}\n", label, DeterminismText(runs.determinism),
               runs.skipped);
    return;
  }
  const std::string matching =
      runs.runs_matching_recorded < 0 ? "-"
                                      : fmt::format("{}/{}", runs.runs_matching_recorded, runs.runs);
  fmt::print("  {:<52} {:<16} {:>4} {:>8} {:>12} {:>12} {:>9} {:>10.4f}  {}\n", label,
             DeterminismText(runs.determinism), runs.runs, runs.distinct_outputs,
             DiffText(runs, runs.max_abs_diff), DiffText(runs, runs.max_rel_diff), matching,
             runs.ms_per_call, runs.stable() ? "stable" : "VARIES");
}

}  // namespace

void PrintAlgorithmTable(const std::vector<replay::AlgorithmRuns>& candidates) {
  fmt::print("  {:<52} {:<16} {:>4} {:>8} {:>12} {:>12} {:>9} {:>10}  {}\n", "algorithm",
             "determinism", "runs", "distinct", "max abs diff", "max rel diff", "recorded",
             "ms/call", "result");
  for (const replay::AlgorithmRuns& runs : candidates) PrintRuns(runs);
}

int RunReplayOp(const ReplayOpOptions& options) {
  if (options.repeat < 1) {
    PrintError(fmt::format("replay: --repeat must be at least 1, not {}", options.repeat));
    return kExitUsage;
  }
  std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(options.trace);
  if (reader == nullptr) return kExitUsage;
  // A damaged trace is refused whole, wherever the damage lies (every reader reports it).
  ReadWholeTrace(*reader);
  if (ReportTraceState(options.trace, *reader) != kExitOk) {
    PrintError(fmt::format("replay: {}: damaged trace; not replayed", options.trace));
    return kExitUsage;
  }
  const std::optional<format::OpRecord> op = reader->FindOp(options.op);
  if (!op) {
    PrintError(fmt::format("replay: {}: there is no op {} in this trace{}", options.trace,
                           options.op,
                           reader->damage().empty() ? "" : " (parts of the trace are damaged)"));
    ReportTraceState(options.trace, *reader);
    return kExitUsage;
  }
  for (Status status : {replay::CheckReplayable(*op), replay::CheckCaptured(*op)}) {
    if (!status.ok()) {
      PrintError(fmt::format("replay: {}: {}", options.trace, status.message()));
      return kExitUsage;
    }
  }

  // Replaying runs code from the trace on this machine: only on the GPU and driver it was
  // recorded with, unless forced.
  StatusOr<replay::MachineFacts> machine = replay::QueryMachine(op->device_ordinal);
  if (!machine.ok()) {
    PrintError(fmt::format("replay: {}", machine.status().message()));
    return kExitUsage;
  }
  const std::vector<std::string> mismatches =
      replay::MachineMismatches(reader->header(), op->device_ordinal, *machine);
  std::string mismatch_text;
  for (const std::string& mismatch : mismatches) {
    mismatch_text += (mismatch_text.empty() ? "" : "; ") + mismatch;
  }
  if (!mismatches.empty() && !options.force) {
    PrintError(fmt::format(
        "replay: {} was recorded on another machine ({}); replaying runs the trace's op on this "
        "GPU and would not show what happened there; pass --force to replay anyway",
        options.trace, mismatch_text));
    return kExitUsage;
  }
  if (!mismatches.empty()) {
    PrintWarning(fmt::format("replay: forced despite another machine ({})", mismatch_text));
  }

  replay::OpReplayOptions replay_options;
  replay_options.repeat = options.repeat;
  replay_options.try_deterministic = options.try_deterministic;
  StatusOr<replay::OpReplayReport> report = replay::ReplayOp(*reader, *op, replay_options);
  if (!report.ok()) {
    PrintError(fmt::format("replay: {}: {}", options.trace, report.status().message()));
    return kExitUsage;
  }

  fmt::print("op {}: {} on stream {}\n", op->sequence, op->name, op->stream_id);
  fmt::print("  problem: {}\n", report->problem);
  fmt::print("  replayed on: {} (compute capability {}.{}, driver {}){}\n", machine->gpu_name,
             machine->cc_major, machine->cc_minor, machine->driver,
             mismatches.empty() ? "" : ", forced");
  fmt::print("  output compared: {} ({} bytes), {} run{} per algorithm\n", report->output_role,
             report->output_bytes, options.repeat, options.repeat == 1 ? "" : "s");
  PrintAlgorithmTable(report->algorithms);

  const replay::AlgorithmRuns& recorded = report->algorithms.front();
  if (recorded.stable()) {
    fmt::print("op {} is stable: {} runs of {} gave bitwise identical {}\n", op->sequence,
               recorded.runs, recorded.name, report->output_role);
  } else {
    fmt::print("op {} VARIES on its own: {} runs of {} gave {} different {}\n", op->sequence,
               recorded.runs, recorded.name, recorded.distinct_outputs, report->output_role);
  }
  if (options.try_deterministic) {
    std::string stable;
    for (size_t i = 1; i < report->algorithms.size(); ++i) {
      const replay::AlgorithmRuns& runs = report->algorithms[i];
      if (!runs.stable()) continue;
      stable += fmt::format("{}{} ({:.4f} ms/call)", stable.empty() ? "" : ", ", runs.name,
                            runs.ms_per_call);
    }
    fmt::print("deterministic alternatives with stable output: {}\n",
               stable.empty() ? "none" : stable);
  }
  if (!report->note.empty()) fmt::print("note: {}\n", report->note);
  return recorded.stable() ? kExitOk : kExitFinding;
}

}  // namespace ndt::tools
