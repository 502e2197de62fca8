// `ndtrace check [-n RUNS] [-o DIR] [digest options] [--deterministic | --pin TRACE] -- CMD...`: is CMD deterministic on the GPU,
// and if not, which op breaks it and why. Runs CMD RUNS times under the tracer into DIR, diffs
// every run against the first, prints one report and a one-line verdict.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "replayer/diff_report.h"
#include "replayer/run_set.h"
#include "replayer/trace_diff.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/traced_run.h"

namespace ndt::tools {

namespace {

struct CheckOptions {
  int runs = 2;
  std::string directory;
  DigestOptions digests;
  PolicyOptions policy;
  int progress_every = 10;  // seconds; 0: no progress while a run goes on
  std::vector<std::string> command;
};

std::string DefaultDirectory() {
  const std::time_t now = std::time(nullptr);
  return fmt::format("ndtrace-check-{:%Y%m%d-%H%M%S}", fmt::localtime(now));
}

std::string CommandText(const std::vector<std::string>& command) {
  std::string text;
  for (const std::string& arg : command) text += (text.empty() ? "" : " ") + arg;
  return text;
}

// The ops of every process of the run whose main trace path is `trace`.
StatusOr<TraceSummary> SummarizeRun(const std::string& trace) {
  StatusOr<std::vector<replay::ProcessTrace>> processes = replay::FindProcessTraces(trace);
  if (!processes.ok()) return processes.status();
  TraceSummary total;
  total.processes = 0;
  for (const replay::ProcessTrace& process : *processes) {
    StatusOr<TraceSummary> summary = SummarizeTrace(process.path);
    if (!summary.ok()) return summary.status();
    total.ops += summary->ops;
    total.records += summary->records;
    total.bytes += summary->bytes;
    ++total.processes;
  }
  return total;
}

// One line naming the first divergence, for the verdict.
std::string DivergenceLine(const replay::DiffReport& report) {
  if (!report.first_divergence) {
    if (report.first_structural) return "the runs differ in structure: " + report.first_structural->what;
    return "the runs are not comparable";
  }
  const replay::Divergence& d = *report.first_divergence;
  std::string line = fmt::format("op {} ({}", d.op.sequence, replay::DivergenceClassName(d.klass));
  if (d.root) {
    line += fmt::format("; suspect op {} {}", d.root->sequence, d.root->name);
  } else if (d.klass != replay::DivergenceClass::kUncovered) {
    line += "; " + d.op.name;
  }
  if (d.hint && d.hint->framework_op.rfind('(', 0) != 0) line += "; " + d.hint->framework_op;
  return line + ")";
}

int RunCheck(const CheckOptions& options) {
  if (!HasSeparator("check")) {
    PrintError("check: put `--` before the command to run: ndtrace check [-n RUNS] -- CMD...");
    return kExitUsage;
  }
  if (options.runs < 2 || options.runs > 100) {
    PrintError(fmt::format("check: -n must be between 2 and 100 (got {})", options.runs));
    return kExitUsage;
  }
  if (options.progress_every < 0) {
    PrintError(fmt::format("check: --progress-every must be 0 or more seconds (got {})",
                           options.progress_every));
    return kExitUsage;
  }
  if (!ApplyDigestOptions("check", options.digests)) return kExitUsage;
  if (!ApplyPolicyOptions("check", options.policy)) return kExitUsage;
  const std::filesystem::path directory =
      options.directory.empty() ? DefaultDirectory() : options.directory;
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    PrintError(fmt::format("check: cannot create {}: {}", directory.string(), error.message()));
    return kExitUsage;
  }

  const std::string command = CommandText(options.command);
  std::vector<std::string> traces;
  std::optional<int> first_exit;
  for (int i = 1; i <= options.runs; ++i) {
    const std::string trace = (directory / fmt::format("run-{}.ndt", i)).string();
    const std::string log = (directory / fmt::format("run-{}.log", i)).string();
    fmt::print(stderr, "ndtrace check: run {} of {}: {}\n", i, options.runs, command);
    std::filesystem::remove(trace, error);
    RunProgress progress;
    progress.every = std::chrono::seconds(options.progress_every);
    progress.report = [&](std::chrono::seconds running) {
      std::optional<uint64_t> ops;
      size_t processes = 0;
      if (auto processes_so_far = replay::FindProcessTraces(trace); processes_so_far.ok()) {
        for (const replay::ProcessTrace& process : *processes_so_far) {
          if (const std::optional<uint64_t> more = OpsSoFar(process.path)) {
            ops = ops.value_or(0) + *more;
            ++processes;
          }
        }
      }
      fmt::print(stderr, "ndtrace check: run {} of {}: running for {} s, {}\n", i, options.runs,
                 running.count(),
                 !ops             ? std::string("no CUDA call yet")
                 : processes > 1 ? fmt::format("{} ops recorded so far by {} processes", *ops,
                                                processes)
                                  : fmt::format("{} ops recorded so far", *ops));
    };
    StatusOr<TracedRun> run = RunTraced("check", options.command, trace, log, progress);
    if (!run.ok()) {
      PrintError(run.status().message());
      return kExitUsage;
    }
    StatusOr<TraceSummary> summary = SummarizeRun(trace);
    if (!summary.ok()) {
      PrintError(fmt::format("check: run {} left no readable trace (exit status {}; output in "
                             "{}): {}",
                             i, run->exit_code, log, summary.status().message()));
      return kExitUsage;
    }
    fmt::print(stderr, "ndtrace check: run {} of {}: exit status {}, {} ops recorded{}\n", i,
               options.runs, run->exit_code, summary->ops,
               summary->processes > 1 ? fmt::format(" by {} processes", summary->processes)
                                      : std::string());
    if (first_exit && *first_exit != run->exit_code) {
      PrintWarning(fmt::format("run {} exited with status {}, run 1 with {}", i, run->exit_code,
                               *first_exit));
    }
    if (!first_exit) first_exit = run->exit_code;
    traces.push_back(trace);
  }

  // A stand-in result is never presented as a GPU result.
  StatusOr<std::vector<replay::ProcessTrace>> first_run = replay::FindProcessTraces(traces.front());
  if (first_run.ok()) {
    if (auto reader = format::TraceReader::Open(first_run->front().path); reader.ok()) {
      const auto& gpus = (*reader)->header().gpus;
      if (!gpus.empty() && gpus.front().simulated) {
        fmt::print("note: simulated device (no GPU found): these runs used ndtrace's stand-in "
                   "device, a CPU implementation of CUDA; results say nothing about a GPU\n");
      }
    }
  }

  std::optional<replay::DiffReport> first_diverged;
  std::string first_process;
  int diverged_runs = 0;
  for (size_t i = 1; i < traces.size(); ++i) {
    StatusOr<replay::RunDiff> diff = replay::DiffRuns(traces.front(), traces[i]);
    if (!diff.ok()) {
      PrintError(diff.status().message());
      return kExitUsage;
    }
    if (diff->identical()) continue;
    ++diverged_runs;
    const auto* diverged = diff->first_diverged();
    if (!first_diverged) {
      fmt::print("{}", replay::RenderRunDiffText(*diff, ::isatty(STDOUT_FILENO)));
      if (diverged != nullptr) {
        first_diverged = diverged->second;
        if (!diff->single()) first_process = diverged->first + ", ";
      }
    } else if (diverged != nullptr) {
      fmt::print("run {} also diverged from run 1, at {}{}\n", i + 1,
                 diff->single() ? "" : diverged->first + ", ", DivergenceLine(diverged->second));
    }
  }
  if (diverged_runs == 0) {
    StatusOr<TraceSummary> summary = SummarizeRun(traces.front());
    fmt::print("ndtrace check: deterministic: {} runs gave bitwise-identical results ({} ops "
               "each); traces in {}\n",
               options.runs, summary.ok() ? summary->ops : 0, directory.string());
    return kExitOk;
  }
  fmt::print("ndtrace check: NOT deterministic: {} of {} runs diverged from run 1, first at {}; "
             "traces in {}\n",
             diverged_runs, options.runs - 1,
             first_diverged ? first_process + DivergenceLine(*first_diverged)
                            : std::string("a process that ran in one run only"),
             directory.string());
  return kExitFinding;
}

}  // namespace

Command AddCheckCommand(CLI::App& parent) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* app = parent.add_subcommand(
      "check", "Run CMD several times under the tracer and say whether its GPU work is "
               "bitwise reproducible; if not, name the first divergent op and why. "
               "Exit 0 deterministic, 1 not, 2 error.");
  app->add_option("-n,--runs", options->runs, "How many runs (default 2)");
  app->add_option("-o,--output", options->directory,
                  "Directory for the traces and program logs (default ndtrace-check-<time>)");
  app->add_option("--progress-every", options->progress_every,
                  "While a run goes on, say every S seconds how many ops it has recorded "
                  "(default 10; 0: only when it ends)");
  AddDigestOptions(app, &options->digests);
  AddPolicyOptions(app, &options->policy);
  app->add_option("command", options->command, "The program and its arguments, after --")
      ->required();
  return {app, [options] { return RunCheck(*options); }};
}

}  // namespace ndt::tools
