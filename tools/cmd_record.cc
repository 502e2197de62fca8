// `ndtrace record [-o PATH] [--quiet] [digest options] [--deterministic | --pin TRACE] -- CMD...`: runs CMD with libndtrace.so
// preloaded, so that it writes a trace of its GPU work to PATH, and returns CMD's exit status.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
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

// A check for --capture OPSET (tracer/capture.h): a comma list of op numbers N and ranges A-B
// (decimal, 64 bits, A <= B), kernel:GLOB, op kinds and API names. The tracer ignores a token
// it cannot use; here it is an error, so that `--capture 99999999999999999999` (a number too
// large, which the tracer would take for a name) or `--capture 5-3` is said, not ignored.
CLI::Validator CaptureSet() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto number = [](std::string_view digits) {
          uint64_t value = 0;
          const char* end = digits.data() + digits.size();
          const auto [stop, error] = std::from_chars(digits.data(), end, value);
          return !digits.empty() && error == std::errc() && stop == end
                     ? std::optional<uint64_t>(value)
                     : std::nullopt;
        };
        size_t start = 0;
        while (start <= text.size()) {
          const size_t comma = std::min(text.find(',', start), text.size());
          std::string_view token = std::string_view(text).substr(start, comma - start);
          start = comma + 1;
          while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
          while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
          if (token.empty()) continue;
          const size_t dash = token.find('-');
          const bool digit_first = token.front() >= '0' && token.front() <= '9';
          bool ok = false;
          if (dash == std::string_view::npos && digit_first) {
            ok = number(token).has_value();
          } else if (dash != std::string_view::npos && digit_first) {
            const auto first = number(token.substr(0, dash));
            const auto last = number(token.substr(dash + 1));
            ok = first && last && *first <= *last;
          } else if (token.rfind("kernel:", 0) == 0) {
            ok = token.size() > 7;
          } else {
            ok = std::all_of(token.begin(), token.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_';
            });
          }
          if (!ok) {
            return "'" + std::string(token) +
                   "' is not an op number N, a range A-B (A <= B, each below 2^64), kernel:GLOB, "
                   "an op kind or an API name";
          }
        }
        return std::string();
      },
      "OPSET", "CaptureSet");
}

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
                  "Trace path (default: ndtrace-<pid>.ndt, <pid> the traced program's process id, in the "
                  "directory the program is in when it makes its first CUDA call: this one unless "
                  "it changes directory)");
  app->add_flag("--quiet", options->quiet, "Do not print the summary line");
  app->add_flag("--strict", options->strict,
                "Fail closed: when the tracer cannot record (unwritable path, full disk), the "
                "program's CUDA calls fail instead of running untraced");
  AddDigestOptions(app, &options->digests);
  AddPolicyOptions(app, &options->policy);
  AddPythonOptions(app, &options->python);
  app->add_option("--capture", options->capture,
                  "Store the full inputs and outputs of these ops for `replay --op`: a comma list "
                  "of op numbers, ranges A-B, kernel:GLOB and op kinds (cudnn_convolution)")
      ->check(CaptureSet());
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
