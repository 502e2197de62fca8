// `ndtrace bisect [-n RUNS] [--max-runs M] [--confirm-runs K] [--window-replays R]
// [--process KEY] [-o DIR] -- CMD...`: narrows a nondeterministic run of CMD down to the first op
// that diverges, recording CMD again with digests placed ever closer around the first difference;
// once the window is narrow, records it once captured and replays it from the trace (up to R times)
// instead of running CMD, else digests it op by op and confirms the op by replaying it alone K
// times (replayer/bisect.h). Exit 0 no run diverged, 1 found, 2 error.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "replayer/bisect.h"
#include "replayer/diff_report.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/traced_run.h"

namespace ndt::tools {

namespace {

struct BisectCommandOptions {
  int runs = 4;
  int max_runs = 40;
  int confirm_runs = 10;
  int window_replays = 2;
  std::string process;  // the process followed in a run of several ("rank 1"); empty: main
  std::string directory;
  std::vector<std::string> command;
};

int RunBisect(const BisectCommandOptions& options) {
  if (!HasSeparator("bisect")) {
    PrintError("bisect: put `--` before the command to run: ndtrace bisect [-n RUNS] -- CMD...");
    return kExitUsage;
  }
  if (options.runs < 2 || options.runs > 100) {
    PrintError(fmt::format("bisect: -n must be between 2 and 100 (got {})", options.runs));
    return kExitUsage;
  }
  if (options.max_runs < 3) {
    PrintError(fmt::format("bisect: --max-runs must be at least 3 (got {})", options.max_runs));
    return kExitUsage;
  }
  if (options.confirm_runs < 0 || options.confirm_runs > 1000) {
    PrintError(fmt::format("bisect: --confirm-runs must be between 0 and 1000 (got {})",
                           options.confirm_runs));
    return kExitUsage;
  }
  const std::filesystem::path directory =
      options.directory.empty()
          ? std::filesystem::path(fmt::format("ndtrace-bisect-{:%Y%m%d-%H%M%S}",
                                              fmt::localtime(std::time(nullptr))))
          : std::filesystem::path(options.directory);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    PrintError(fmt::format("bisect: cannot create {}: {}", directory.string(), error.message()));
    return kExitUsage;
  }

  const replay::RunProgram run_program =
      MakeRunProgram("bisect", options.command, directory.string(), "run", options.process);
  replay::BisectOptions bisect;
  bisect.runs_per_step = options.runs;
  bisect.max_runs = options.max_runs;
  bisect.confirm_runs = options.confirm_runs;
  bisect.window_replays = options.window_replays;
  StatusOr<replay::BisectResult> result =
      replay::Bisect(bisect, run_program, [](const std::string& line) {
        fmt::print(stderr, "ndtrace bisect: {}\n", line);
      });
  if (!result.ok()) {
    PrintError(result.status().message().rfind("bisect", 0) == 0
                   ? result.status().message()
                   : "bisect: " + result.status().message());
    return kExitUsage;
  }
  const std::string summary =
      fmt::format("{} program runs (N = {} ops: ceil(log2 N) = {}) and {} window replay{}",
                  result->runs, result->ops, replay::CeilLog2(result->ops), result->window_replays,
                  result->window_replays == 1 ? "" : "s");
  if (!result->report) {
    fmt::print("ndtrace bisect: no divergence: {}; {}; traces in {}\n", result->stopped_because,
               summary, directory.string());
    return kExitOk;
  }
  if (result->found_op) {
    TakePythonStacks("bisect", options.command, directory,
                     options.process.empty() ? "main" : options.process, result->report->path_a,
                     &*result->report);
  }
  fmt::print("{}", replay::RenderDiffText(*result->report, ::isatty(STDOUT_FILENO)));
  for (const std::string& step : result->steps) fmt::print("  step: {}\n", step);
  if (result->found_op) {
    const replay::Divergence& d = *result->report->first_divergence;
    std::string python;
    if (d.python_stack) {
      python = (d.python_stack->status == format::PythonStackStatus::kCaptured ? " " : "; ") +
               PythonStackWords(*d.python_stack);
    }
    fmt::print("ndtrace bisect: op {} {}{} ({}) found in {}; traces in {}\n", d.op.sequence,
               d.op.name, python, replay::DivergenceClassName(d.klass), summary,
               directory.string());
    if (!result->confirmation.empty()) {
      fmt::print("ndtrace bisect: {}\n", result->confirmation);
    }
  } else {
    fmt::print("ndtrace bisect: diverged, but not narrowed to one op: {}; {}; traces in {}\n",
               result->stopped_because, summary, directory.string());
  }
  return kExitFinding;
}

}  // namespace

Command AddBisectCommand(CLI::App& parent) {
  auto options = std::make_shared<BisectCommandOptions>();
  CLI::App* app = parent.add_subcommand(
      "bisect", "Narrow a nondeterministic run of CMD down to the first op that diverges, "
                "re-running it with digests ever closer around the first difference. Exit 0 "
                "no divergence, 1 found, 2 error.");
  app->add_option("-n,--runs", options->runs,
                  "Runs one step may record before deciding the op does not diverge there "
                  "(default 4)")
      ->check(WholeNumber(2, 100));
  app->add_option("--max-runs", options->max_runs, "Program runs in all (default 40)")
      ->check(WholeNumber(3, 10000));
  app->add_option("--confirm-runs", options->confirm_runs,
                  "Replay the op found alone this many times, from one more run that captures "
                  "it (default 10; 0: no confirmation)")
      ->check(WholeNumber(0, 1000));
  app->add_option("--window-replays", options->window_replays,
                  "Once the window is narrow enough to digest op by op, record it once captured "
                  "and replay it from the trace alone up to this many times instead (default 2; "
                  "0: per-op digest runs of the program)")
      ->check(WholeNumber(0, 100));
  app->add_option("--process", options->process,
                  "In a program of several processes, follow this one: \"rank R\" or "
                  "\"process N\", as `ndtrace check` names them (default: the program's own)");
  app->add_option("-o,--output", options->directory,
                  "Directory for the traces and program logs (default ndtrace-bisect-<time>)");
  app->add_option("command", options->command, "The program and its arguments, after --")
      ->required();
  return {app, [options] { return RunBisect(*options); }};
}

}  // namespace ndt::tools
