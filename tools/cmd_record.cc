// `ndtrace record [-o PATH] [--quiet] [digest options] [--deterministic | --pin TRACE] -- CMD...`: runs CMD with libndtrace.so
// preloaded, so that it writes a trace of its GPU work to PATH, and returns CMD's exit status.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replayer/run_set.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/replay_window.h"
#include "tools/traced_run.h"

namespace ndt::tools {

namespace {

struct RecordOptions {
  std::string output;
  bool quiet = false;
  bool strict = false;  // NDTRACE_STRICT for the tracer: fail closed
  DigestOptions digests;
  PolicyOptions policy;
  PythonOptions python;
  std::string capture;  // NDTRACE_CAPTURE for the tracer (tools/README.md)
  std::vector<std::string> windows;  // --window A:B: captured as ranges for window replay
  std::vector<std::string> command;
};

int RunRecord(const RecordOptions& options) {
  if (!HasSeparator("record")) {
    PrintError("record: put `--` before the command to run: ndtrace record [-o PATH] -- CMD...");
    return kExitUsage;
  }
  if (!ApplyDigestOptions("record", options.digests)) return kExitUsage;
  if (!ApplyPolicyOptions("record", options.policy)) return kExitUsage;
  ApplyPythonOptions(options.python);
  std::string capture = options.capture;
  for (const std::string& text : options.windows) {
    const std::optional<WindowSpec> window = ParseWindowSpec(text);
    if (!window) {
      PrintError(fmt::format(
          "record: --window {}: expected A:B (ops A to B, B >= A) or A: (from A to the end)",
          text));
      return kExitUsage;
    }
    capture += (capture.empty() ? "" : ",") + CaptureRange(*window);
  }
  if (!capture.empty()) setenv("NDTRACE_CAPTURE", capture.c_str(), 1);
  if (options.strict) setenv("NDTRACE_STRICT", "1", 1);
  StatusOr<TracedRun> run = RunTraced("record", options.command, options.output);
  if (!run.ok()) {
    PrintError(run.status().message());
    return kExitUsage;
  }
  const int exit_code = run->exit_code;
  const std::string path =
      options.output.empty() ? fmt::format("ndtrace-{}.ndt", run->pid) : options.output;
  StatusOr<std::vector<replay::ProcessTrace>> traces = replay::FindProcessTraces(path);
  if (!traces.ok()) {
    // An unwritable path has been reported by the tracer inside the program already.
    const std::filesystem::path directory = std::filesystem::path(path).parent_path();
    const bool writable = access(directory.empty() ? "." : directory.c_str(), W_OK) == 0;
    if (writable && !options.quiet) {
      fmt::print(stderr, "ndtrace: no trace was written to {}: the program made no CUDA call\n",
                 path);
    }
    return exit_code;
  }
  if (options.quiet) return exit_code;
  for (const replay::ProcessTrace& trace : *traces) {
    StatusOr<TraceSummary> summary = SummarizeTrace(trace.path);
    if (!summary.ok()) {
      fmt::print(stderr, "ndtrace: trace {} is unreadable: {}\n", trace.path,
                 summary.status().message());
      continue;
    }
    fmt::print(stderr, "ndtrace: trace written to {} ({}{} ops, {} records, {} bytes){}\n",
               trace.path, trace.key == "main" ? "" : trace.key + ", ", summary->ops,
               summary->records, summary->bytes,
               summary->complete ? "" : " (incomplete: the program did not exit normally)");
  }
  return exit_code;
}

}  // namespace

Command AddRecordCommand(CLI::App& parent) {
  auto options = std::make_shared<RecordOptions>();
  CLI::App* app = parent.add_subcommand(
      "record", "Run CMD with the tracer preloaded and write a trace of its GPU work.");
  app->add_option("-o,--output", options->output,
                  "Trace path (default: ndtrace-<pid>.ndt in the program's directory)");
  app->add_flag("--quiet", options->quiet, "Do not print the summary line");
  app->add_flag("--strict", options->strict,
                "Fail closed: when the tracer cannot record (unwritable path, full disk), the "
                "program's CUDA calls fail instead of running untraced");
  AddDigestOptions(app, &options->digests);
  AddPolicyOptions(app, &options->policy);
  AddPythonOptions(app, &options->python);
  app->add_option("--capture", options->capture,
                  "Store the full inputs and outputs of these ops for `replay --op`: a comma list "
                  "of op numbers, ranges A-B, kernel:GLOB and op kinds (cudnn_convolution)");
  app->add_option("--window", options->windows,
                  "Keep what a standalone replay of ops A..B needs (`replay TRACE --window "
                  "A:B`): A:B, or A: to the end; may be given several times")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("command", options->command, "The program and its arguments, after --")
      ->required();
  return {app, [options] { return RunRecord(*options); }};
}

}  // namespace ndt::tools
