// `ndtrace run [--deterministic | --pin TRACE] [--show-decisions N] [--report] [--report-json FILE] -- CMD...`: runs CMD with the
// tracer applying a policy, without keeping a trace. The tracer records into a temporary trace
// (metadata only: no digests) so that the policy's decisions can be listed when CMD ends; the
// trace is then deleted.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "replayer/determinism_cost.h"
#include "replayer/run_set.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/record_text.h"
#include "tools/traced_run.h"

namespace ndt::tools {

namespace {

struct RunOptions {
  PolicyOptions policy;
  PythonOptions python;
  size_t show = 10;
  bool report = false;      // --report: what the policy costs in GPU time (one more, plain run)
  std::string report_json;  // --report-json FILE: the same as an ndtrace.cost/1 document
  std::vector<std::string> command;
};

// `text`'s lines, without their newlines.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end = text.find('\n'); end != std::string::npos; end = text.find('\n', start)) {
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// Prints the policy decisions of the trace at `path`: a count, then the first `show` of them.
void PrintDecisions(const std::string& path, size_t show) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return;  // the program made no CUDA call: nothing was decided
  std::string listed;
  size_t decisions = 0, unapplied = 0;
  format::Record record;
  while ((*reader)->Next(&record)) {
    const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record);
    if (decision == nullptr) continue;
    ++decisions;
    if (!decision->applied) ++unapplied;
    if (decisions <= show) AppendRecordText(record, TextOptions{.stable = true}, &listed);
  }
  fmt::print(stderr, "ndtrace: {} policy decision{}{}\n", decisions, decisions == 1 ? "" : "s",
             unapplied == 0 ? "" : fmt::format(" ({} not applied)", unapplied));
  std::string line;
  for (char c : listed) {
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    const size_t start = line.find_first_not_of(' ');
    fmt::print(stderr, "ndtrace:   {}\n", start == std::string::npos ? line : line.substr(start));
    line.clear();
  }
  if (decisions > show) fmt::print(stderr, "ndtrace:   ... and {} more\n", decisions - show);
}

int RunRun(const RunOptions& options) {
  if (!HasSeparator("run")) {
    PrintError("run: put `--` before the command to run: ndtrace run --deterministic -- CMD...");
    return kExitUsage;
  }
  if (!options.policy.deterministic && options.policy.pin.empty()) {
    PrintError("run: give a policy: --deterministic or --pin TRACE");
    return kExitUsage;
  }
  if (!ApplyPolicyOptions("run", options.policy)) return kExitUsage;
  ApplyPythonOptions(options.python);
  // Metadata only: the policy needs no digests.
  setenv("NDTRACE_LIBRARY_DIGESTS", "0", 1);
  setenv("NDTRACE_DIGEST_EXIT", "0", 1);
  std::error_code error;
  const std::filesystem::path temporary = std::filesystem::temp_directory_path(error);
  const std::string trace =
      (error ? std::filesystem::path("/tmp") : temporary) /
      fmt::format("ndtrace-run-{}.ndt", getpid());
  StatusOr<TracedRun> run = RunTraced("run", options.command, trace);
  if (!run.ok()) {
    PrintError(run.status().message());
    return kExitUsage;
  }
  PrintDecisions(trace, options.show);
  int status = run->exit_code;
  // --report: the program once more without the policy, and the GPU time of what it replaced.
  const std::string plain = trace.substr(0, trace.size() - 4) + "-plain.ndt";
  if (options.report || !options.report_json.empty()) {
    fmt::print(stderr, "ndtrace: one run without the policy, to measure what it costs\n");
    unsetenv("NDTRACE_POLICY");
    unsetenv("NDTRACE_PIN");
    // Its output goes to a log (removed below): the program's own output is the first run's.
    StatusOr<TracedRun> without = RunTraced("run", options.command, plain, plain + ".log");
    StatusOr<replay::DeterminismCost> cost =
        without.ok() ? replay::MeasureDeterminismCost(trace, plain)
                     : StatusOr<replay::DeterminismCost>(without.status());
    if (!cost.ok()) {
      PrintError("run: cost of determinism not measured: " + cost.status().message());
      status = kExitUsage;
    } else {
      if (options.report) {
        for (const std::string& line : Lines(replay::RenderCostText(*cost))) {
          fmt::print(stderr, "ndtrace: {}\n", line);
        }
      }
      if (!options.report_json.empty()) {
        StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open(options.report_json);
        Status written = out.ok() ? Status::Ok() : out.status();
        if (out.ok()) {
          (*out)->Write(replay::RenderCostJson(*cost) + "\n");
          written = (*out)->Close();
        }
        if (!written.ok()) {
          PrintError("run: --report-json: " + written.message());
          status = kExitUsage;
        }
      }
    }
  }
  // Children of the program (fork) write <trace>.<pid>: removed with it.
  for (const std::string& path : {trace, plain}) replay::RemoveProcessTraces(path);
  return status;
}

}  // namespace

Command AddRunCommand(CLI::App& parent) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand(
      "run", "Run CMD under a policy (--deterministic or --pin TRACE) without keeping a trace.");
  AddPolicyOptions(app, &options->policy);
  AddPythonOptions(app, &options->python);
  app->add_flag("--report", options->report,
                "Run CMD once more without the policy and say what determinism costs in GPU time "
                "(CUPTI), per replaced op name and for the whole run");
  app->add_option("--report-json", options->report_json,
                  "The same, written to FILE as an ndtrace.cost/1 JSON document")
      ->type_name("FILE");
  app->add_option("--show-decisions", options->show,
                  "List at most N policy decisions when CMD ends (default 10)")
      ->check(WholeNumber(0, 1000000));
  app->add_option("command", options->command, "The program and its arguments, after --")
      ->required();
  return {app, [options] { return RunRun(*options); }};
}

}  // namespace ndt::tools
