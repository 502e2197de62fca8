// `ndtrace replay TRACE [-o NEW] [--stop] [digest options] [--force] -- CMD...`: live verify.
// Re-runs CMD under the tracer forcing the library choices and cuRAND state recorded in TRACE
// (NDTRACE_PIN), follows the new trace as its chunks land and compares it with TRACE; at the
// first divergence prints the diff report and, with --stop, ends the program (SIGTERM, then
// SIGKILL after 2 s). Exit 0 identical to the end, 1 diverged, 2 error.
//
// `ndtrace replay TRACE --op N [--repeat K] [--try-deterministic] [--force]`: standalone op
// replay, forwarded to RunReplayOp (tools/replay_op.h).
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "formats/trace_reader.h"
#include "replayer/diff_report.h"
#include "replayer/live_verify.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/replay_op.h"
#include "tools/traced_run.h"

extern char** environ;

namespace ndt::tools {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kTermGrace = std::chrono::seconds(2);

struct ReplayOptions {
  std::string trace;
  std::string output;
  bool stop = false;
  DigestOptions digests;
  std::vector<std::string> command;
  // --op: standalone op replay.
  std::optional<uint64_t> op;
  int repeat = 20;
  bool try_deterministic = false;
  bool force = false;
};

// Starts `command` with the tracer preloaded writing `trace_path`, without waiting for it (the
// environment as RunTraced gives it). Returns the child's pid.
StatusOr<pid_t> StartTraced(const std::vector<std::string>& command,
                            const std::string& trace_path) {
  const std::string library = TracerLibrary();
  if (library.empty()) {
    return Status::Error("replay: cannot find libndtrace.so beside ndtrace or in its build");
  }
  std::vector<std::string> environment;
  std::string preload = library;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.rfind("LD_PRELOAD=", 0) == 0) {
      if (text.size() > 11) preload += ":" + std::string(text.substr(11));
    } else if (text.rfind("NDTRACE_OUTPUT=", 0) != 0 &&
               text.rfind("NDTRACE_LAUNCHER_PID=", 0) != 0) {
      environment.emplace_back(text);
    }
  }
  environment.push_back("LD_PRELOAD=" + preload);
  environment.push_back("NDTRACE_LAUNCHER_PID=" + std::to_string(getpid()));
  environment.push_back("NDTRACE_OUTPUT=" + trace_path);
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  const int error = posix_spawnp(&child, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (error != 0) {
    return Status::Error(fmt::format("replay: cannot run {}: {}", args[0], std::strerror(error)));
  }
  return child;
}

// The exit code of `child` once it has ended, or nullopt while it runs (`block`: wait).
std::optional<int> Reap(pid_t child, bool block) {
  int status = 0;
  while (true) {
    const pid_t done = waitpid(child, &status, block ? 0 : WNOHANG);
    if (done == child) break;
    if (done == 0) return std::nullopt;
    if (errno != EINTR) return 255;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
}

// SIGTERM (the tracer closes its trace), then SIGKILL when it has not ended after 2 s.
int Stop(pid_t child) {
  kill(child, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + kTermGrace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::optional<int> code = Reap(child, false)) return *code;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(child, SIGKILL);
  return *Reap(child, true);
}

std::string DefaultOutput(const std::string& reference) {
  std::filesystem::path path(reference);
  return (path.parent_path() / (path.stem().string() + "-replay.ndt")).string();
}

// The digest options for the re-run: the user's, else those the reference shows it was
// recorded with.
bool ChooseDigests(const ReplayOptions& options, DigestOptions* chosen) {
  *chosen = options.digests;
  const bool user_chose = options.digests.every != 0 || options.digests.sync ||
                          !options.digests.window.empty() || options.digests.no_exit;
  // Read the whole reference once: a damaged one is refused before the program starts.
  StatusOr<replay::RecordedDigests> recorded = replay::FindRecordedDigests(options.trace);
  if (!recorded.ok()) {
    PrintError("replay: " + recorded.status().message());
    return false;
  }
  if (!user_chose) {
    chosen->every = recorded->every;
    chosen->sync = recorded->sync;
    chosen->window = recorded->window;
    chosen->no_exit = !recorded->exit;
    fmt::print(stderr,
               "ndtrace replay: digests as the reference was recorded: every {} ops, at syncs "
               "{}, window {}, at exit {}\n",
               chosen->every == 0 ? std::string("-") : std::to_string(chosen->every),
               chosen->sync ? "yes" : "no", chosen->window.empty() ? "-" : chosen->window,
               chosen->no_exit ? "no" : "yes");
  }
  for (const char* name : {"NDTRACE_DIGEST_EVERY", "NDTRACE_DIGEST_SYNC",
                           "NDTRACE_DIGEST_WINDOW", "NDTRACE_DIGEST_EXIT"}) {
    unsetenv(name);
  }
  return ApplyDigestOptions("replay", *chosen);
}

int PrintReport(const replay::LiveVerifier& verifier, bool finished) {
  StatusOr<replay::DiffReport> report = verifier.Report(finished);
  if (!report.ok()) {
    PrintError("replay: " + report.status().message());
    return kExitUsage;
  }
  if (report->identical()) return kExitOk;
  fmt::print("{}", replay::RenderDiffText(*report, ::isatty(STDOUT_FILENO)));
  std::fflush(stdout);
  return kExitFinding;
}

int RunLiveVerify(const ReplayOptions& options) {
  if (!HasSeparator("replay") || options.command.empty()) {
    PrintError("replay: put `--` before the command to run: ndtrace replay TRACE -- CMD... "
               "(or --op N)");
    return kExitUsage;
  }
  StatusOr<std::unique_ptr<format::TraceReader>> reference =
      format::TraceReader::Open(options.trace);
  if (!reference.ok()) {
    PrintError("replay: " + reference.status().message());
    return kExitUsage;
  }
  const format::TraceHeader header = (*reference)->header();
  std::string warning;
  if (Status same = replay::CheckSameProgram(header, options.command, &warning); !same.ok()) {
    if (!options.force) {
      PrintError("replay: " + options.trace + ": " + same.message() + " (--force replays anyway)");
      return kExitUsage;
    }
    PrintWarning("replay: " + same.message());
  } else if (!warning.empty()) {
    PrintWarning("replay: " + warning);
  }
  const std::string output =
      std::filesystem::absolute(options.output.empty() ? DefaultOutput(options.trace)
                                                       : options.output)
          .string();
  std::error_code error;
  if (std::filesystem::equivalent(output, options.trace, error)) {
    PrintError("replay: -o must not name the reference trace");
    return kExitUsage;
  }
  std::filesystem::remove(output, error);
  StatusOr<std::unique_ptr<replay::LiveVerifier>> verifier =
      replay::LiveVerifier::Open(options.trace, output);
  if (!verifier.ok()) {
    PrintError("replay: " + verifier.status().message());
    return kExitUsage;
  }
  DigestOptions digests;
  if (!ChooseDigests(options, &digests)) return kExitUsage;
  PolicyOptions policy;
  policy.pin = options.trace;
  if (!ApplyPolicyOptions("replay", policy)) return kExitUsage;
  if (!header.gpus.empty() && header.gpus.front().simulated) {
    fmt::print(stderr, "note: the reference was recorded on ndtrace's stand-in device (a CPU "
                       "implementation of CUDA); results say nothing about a GPU\n");
  }

  StatusOr<pid_t> child = StartTraced(options.command, output);
  if (!child.ok()) {
    PrintError(child.status().message());
    return kExitUsage;
  }
  replay::LiveVerifier& follower = **verifier;
  std::optional<int> exit_code;
  bool reported = false;
  int result = kExitOk;
  while (!exit_code) {
    exit_code = Reap(*child, false);
    if (exit_code) break;
    if (!reported && follower.Poll()) {
      if (options.stop) {
        // End the program first: the report (a diff of all that landed) takes a while.
        const int code = Stop(*child);
        follower.Poll();
        result = PrintReport(follower, false);
        if (result == kExitOk) {
          fmt::print("ndtrace replay: op {} differs from the reference in a fact the diff does "
                     "not report\n",
                     follower.first_difference().value_or(0));
        }
        if (result == kExitUsage) return kExitUsage;
        fmt::print("ndtrace replay: stopped the program at the first divergence (exit status "
                   "{}); {} ops recorded in {}\n",
                   code, follower.ops_followed(), output);
        return kExitFinding;
      }
      result = PrintReport(follower, false);
      if (result == kExitUsage) {
        Stop(*child);
        return kExitUsage;
      }
      reported = result == kExitFinding;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  follower.Poll();
  if (!reported) {
    const int code = PrintReport(follower, true);
    if (code == kExitOk) {
      fmt::print("ndtrace replay: identical to the reference: {} ops (program exit status {}); "
                 "new trace {}\n",
                 follower.ops_followed(), *exit_code, output);
    } else if (code == kExitFinding) {
      fmt::print("ndtrace replay: diverged from the reference (program exit status {}); new "
                 "trace {}\n",
                 *exit_code, output);
    }
    return code;
  }
  StatusOr<replay::DiffReport> final_report = follower.Report(true);
  if (final_report.ok()) {
    fmt::print("ndtrace replay: the program ran to the end (exit status {}): {} divergent ops, "
               "{} structural differences, {} ops compared; new trace {}\n",
               *exit_code, final_report->divergent_ops, final_report->structural_differences,
               final_report->ops_compared, output);
  }
  return kExitFinding;
}

int RunReplay(const ReplayOptions& options) {
  if (options.op) {
    ReplayOpOptions op;
    op.trace = options.trace;
    op.op = *options.op;
    op.repeat = options.repeat;
    op.try_deterministic = options.try_deterministic;
    op.force = options.force;
    return RunReplayOp(op);
  }
  return RunLiveVerify(options);
}

}  // namespace

Command AddReplayCommand(CLI::App& parent) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* app = parent.add_subcommand(
      "replay",
      "Re-run CMD forcing the choices recorded in TRACE and compare it with TRACE as it runs "
      "(live verify); or, with --op N, re-execute one captured op of TRACE. Exit 0 identical, "
      "1 diverged, 2 error.");
  app->add_option("trace", options->trace, "The reference trace")->required();
  app->add_option("-o,--output", options->output,
                  "Where the re-run writes its trace (default TRACE's name + -replay.ndt)");
  app->add_flag("--stop", options->stop, "End the program at the first divergence");
  AddDigestOptions(app, &options->digests);
  app->add_option("--op", options->op, "Standalone replay of op N (no CMD)");
  app->add_option("--repeat", options->repeat, "--op: how many times to run it (default 20)");
  app->add_flag("--try-deterministic", options->try_deterministic,
                "--op: also run every deterministic alternative algorithm (cuRAND: each fixed "
                "ordering)");
  app->add_flag("--force", options->force,
                "Replay even when TRACE was recorded from another program (or, with --op, "
                "on another GPU or driver)");
  app->add_option("command", options->command, "The program and its arguments, after --");
  return {app, [options] { return RunReplay(*options); }};
}

}  // namespace ndt::tools
