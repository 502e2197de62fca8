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
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "formats/trace_reader.h"
#include "replayer/diff_report.h"
#include "replayer/live_verify.h"
#include "replayer/run_set.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/replay_op.h"
#include "tools/replay_window.h"
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
  std::string window;  // --window A:B: window replay
  int repeat = 0;      // 0: not given (--op: 20, --window: 5)
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
  return WIFEXITED(status)     ? WEXITSTATUS(status)
         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                               : 255;
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
bool ChooseDigests(const ReplayOptions& options, const std::string& reference,
                   DigestOptions* chosen) {
  *chosen = options.digests;
  const bool user_chose = options.digests.every != 0 || options.digests.sync ||
                          !options.digests.window.empty() || options.digests.no_exit;
  // Read the whole reference once: a damaged one is refused, its damage named, before the
  // program starts.
  if (std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(reference)) {
    ReadWholeTrace(*reader);
    if (ReportDamage(reference, reader->damage()) != kExitOk) {
      PrintError("replay: " + reference + ": damaged trace; not replayed");
      return false;
    }
  } else {
    return false;
  }
  StatusOr<replay::RecordedDigests> recorded = replay::FindRecordedDigests(reference);
  if (!recorded.ok()) {
    PrintError("replay: " + recorded.status().message());
    return false;
  }
  if (!user_chose) {
    chosen->every = recorded->every;
    chosen->sync = recorded->sync;
    chosen->window = recorded->window;
    chosen->no_exit = !recorded->exit;
    std::string taken;
    const auto add = [&taken](const std::string& what) { taken += (taken.empty() ? "" : ", ") + what; };
    if (chosen->every != 0) add(fmt::format("of all memory every {} ops", chosen->every));
    if (chosen->sync) add("of all memory at every host synchronisation");
    if (!chosen->window.empty()) add("before and after each op of " + chosen->window);
    if (!chosen->no_exit) add("of all memory at exit");
    fmt::print(stderr, "ndtrace replay: taking the digests the reference took: {}\n",
               taken.empty() ? std::string("none") : taken);
  }
  for (const char* name : {"NDTRACE_DIGEST_EVERY", "NDTRACE_DIGEST_SYNC", "NDTRACE_DIGEST_WINDOW",
                           "NDTRACE_DIGEST_EXIT"}) {
    unsetenv(name);
  }
  return ApplyDigestOptions("replay", *chosen);
}

// Prints the verifier's report when it differs (kExitFinding), after `annotate` has had it (the
// Python stack of the op it names).
int PrintReport(const replay::LiveVerifier& verifier, bool finished, const std::string& heading,
                const std::function<void(replay::DiffReport*)>& annotate) {
  StatusOr<replay::DiffReport> report = verifier.Report(finished);
  if (!report.ok()) {
    PrintError("replay: " + report.status().message());
    return kExitUsage;
  }
  if (finished) {  // while the program runs, its trace's last chunk may be half written
    int damaged = ReportDamage(report->path_a, report->damage_a);
    damaged = std::max(damaged, ReportDamage(report->path_b, report->damage_b));
    if (damaged != kExitOk) {
      PrintError("replay: a trace is damaged; not compared");
      return kExitUsage;
    }
  }
  if (report->identical()) return kExitOk;
  annotate(&*report);
  fmt::print("{}{}", heading, replay::RenderDiffText(*report, ::isatty(STDOUT_FILENO)));
  std::fflush(stdout);
  return kExitFinding;
}

// One process of the run, followed while it runs: the reference's trace of that process and
// the trace the re-run's process of the same rank writes.
struct Follower {
  std::string key;  // "main" or "rank R" (replayer/run_set.h)
  std::string reference;
  std::unique_ptr<replay::LiveVerifier> verifier;
};

// The reference's processes that can be paired with the re-run's while it runs: TRACE itself
// and its ranked companions (PATH.rank<R>). Unranked companions (PATH.<pid>) are named by a pid
// no re-run repeats: they are compared when the program has ended.
StatusOr<std::vector<Follower>> OpenFollowers(const std::string& reference,
                                              const std::string& output, bool* unranked) {
  StatusOr<std::vector<replay::ProcessTrace>> processes = replay::FindProcessTraces(reference);
  if (!processes.ok()) return processes.status();
  std::vector<Follower> followers;
  for (const replay::ProcessTrace& process : *processes) {
    std::string path = output;
    if (process.key.rfind("rank ", 0) == 0) {
      path += ".rank" + process.key.substr(5);
    } else if (process.key != "main") {
      *unranked = true;
      continue;
    }
    std::error_code error;
    std::filesystem::remove(path, error);
    StatusOr<std::unique_ptr<replay::LiveVerifier>> verifier =
        replay::LiveVerifier::Open(process.path, path);
    if (!verifier.ok()) return verifier.status();
    followers.push_back({process.key, process.path, std::move(*verifier)});
  }
  if (followers.empty()) {
    return Status::Error(reference +
                         ": its processes are all unranked companions (PATH.<pid>); "
                         "pass one of them as TRACE");
  }
  return followers;
}

int RunLiveVerify(const ReplayOptions& options) {
  if (!HasSeparator("replay") || options.command.empty()) {
    PrintError(
        "replay: put `--` before the command to run: ndtrace replay TRACE -- CMD... "
        "(or --op N)");
    return kExitUsage;
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
  bool unranked = false;
  StatusOr<std::vector<Follower>> opened = OpenFollowers(options.trace, output, &unranked);
  if (!opened.ok()) {
    PrintError("replay: " + opened.status().message());
    return kExitUsage;
  }
  std::vector<Follower>& followers = *opened;
  const bool several = followers.size() > 1 || followers.front().key != "main";
  StatusOr<std::unique_ptr<format::TraceReader>> reference =
      format::TraceReader::Open(followers.front().reference);
  if (!reference.ok()) {
    PrintError("replay: " + reference.status().message());
    return kExitUsage;
  }
  const format::TraceHeader header = (*reference)->header();
  // The command line to compare is the one the launcher started: the main trace's. Ranked
  // processes record their own.
  if (followers.front().key == "main") {
    std::string warning;
    if (Status same = replay::CheckSameProgram(header, options.command, &warning); !same.ok()) {
      if (!options.force) {
        PrintError("replay: " + options.trace + ": " + same.message() +
                   " (--force replays anyway)");
        return kExitUsage;
      }
      PrintWarning("replay: " + same.message());
    } else if (!warning.empty()) {
      PrintWarning("replay: " + warning);
    }
  }
  if (unranked) {
    PrintWarning(
        "replay: the reference's unranked processes (PATH.<pid>) are compared when the "
        "program has ended, not while it runs");
  }
  DigestOptions digests;
  if (!ChooseDigests(options, followers.front().reference, &digests)) return kExitUsage;
  // Each ranked process pins from its own rank's reference (the tracer looks for PATH.rank<R>).
  setenv("NDTRACE_PIN", std::filesystem::absolute(options.trace, error).c_str(), 1);
  if (!header.gpus.empty() && header.gpus.front().simulated) {
    fmt::print(stderr,
               "note: the reference was recorded on ndtrace's stand-in device (a CPU "
               "implementation of CUDA); results say nothing about a GPU\n");
  }

  StatusOr<pid_t> child = StartTraced(options.command, output);
  if (!child.ok()) {
    PrintError(child.status().message());
    return kExitUsage;
  }
  // As check does: one more run for the Python stack of the op a report names, once the
  // program has ended (with --stop, or before the report).
  const auto python_stack = [&](const Follower& follower) {
    return [&, key = follower.key](replay::DiffReport* report) {
      TakePythonStacks("replay", options.command, std::filesystem::path(output).parent_path(),
                       key, report->path_a, report);
    };
  };
  const auto heading = [&](const Follower& follower) {
    return several ? fmt::format("== {}: {} vs {}\n", follower.key, follower.reference,
                                 follower.verifier->new_path())
                   : std::string();
  };
  std::optional<int> exit_code;
  const Follower* reported = nullptr;
  while (!exit_code) {
    exit_code = Reap(*child, false);
    if (exit_code) break;
    for (Follower& follower : followers) {
      if (reported != nullptr || !follower.verifier->Poll()) continue;
      if (options.stop) {
        // End the program first: the report (a diff of all that landed) takes a while.
        const int code = Stop(*child);
        follower.verifier->Poll();
        const int result =
            PrintReport(*follower.verifier, false, heading(follower), python_stack(follower));
        if (result == kExitOk) {
          fmt::print(
              "ndtrace replay: op {} differs from the reference in a fact the diff does "
              "not report\n",
              follower.verifier->first_difference().value_or(0));
        }
        if (result == kExitUsage) return kExitUsage;
        fmt::print(
            "ndtrace replay: stopped the program at the first divergence{} (exit status "
            "{}); {} ops recorded in {}\n",
            several ? " (" + follower.key + ")" : "", code, follower.verifier->ops_followed(),
            follower.verifier->new_path());
        return kExitFinding;
      }
      // The program still runs: no second run beside it for a Python stack.
      const int result =
          PrintReport(*follower.verifier, false, heading(follower), [](replay::DiffReport*) {});
      if (result == kExitUsage) {
        Stop(*child);
        return kExitUsage;
      }
      if (result == kExitFinding) reported = &follower;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  for (Follower& follower : followers) follower.verifier->Poll();

  if (several || unranked) {
    // The whole run, process by process, as `diff` compares runs.
    StatusOr<replay::RunDiff> run = replay::DiffRuns(options.trace, output);
    if (!run.ok()) {
      PrintError("replay: " + run.status().message());
      return kExitUsage;
    }
    if (ReportRunDamage(*run, /*allow_damage=*/false) != kExitOk) {
      PrintError("replay: a trace is damaged; not compared");
      return kExitUsage;
    }
    if (reported == nullptr)
      fmt::print("{}", replay::RenderRunDiffText(*run, ::isatty(STDOUT_FILENO)));
    fmt::print(
        "ndtrace replay: {} the reference, rank by rank (program exit status {}); new "
        "traces {}\n",
        run->identical() ? "identical to" : "diverged from", *exit_code, output);
    return run->identical() ? kExitOk : kExitFinding;
  }
  replay::LiveVerifier& follower = *followers.front().verifier;
  if (reported == nullptr) {
    const int code = PrintReport(follower, true, "", python_stack(followers.front()));
    if (code == kExitOk) {
      fmt::print(
          "ndtrace replay: identical to the reference: {} ops (program exit status {}); "
          "new trace {}\n",
          follower.ops_followed(), *exit_code, output);
    } else if (code == kExitFinding) {
      fmt::print(
          "ndtrace replay: diverged from the reference (program exit status {}); new "
          "trace {}\n",
          *exit_code, output);
    }
    return code;
  }
  StatusOr<replay::DiffReport> final_report = follower.Report(true);
  if (final_report.ok()) {
    fmt::print(
        "ndtrace replay: the program ran to the end (exit status {}): {} divergent ops, "
        "{} structural differences, {} ops compared; new trace {}\n",
        *exit_code, final_report->divergent_ops, final_report->structural_differences,
        final_report->ops_compared, output);
  }
  return kExitFinding;
}

int RunReplay(const ReplayOptions& options) {
  if (options.op && !options.window.empty()) {
    PrintError("replay: --op and --window exclude each other");
    return kExitUsage;
  }
  if (!options.window.empty()) {
    const std::optional<WindowSpec> window = ParseWindowSpec(options.window);
    if (!window) {
      PrintError(fmt::format(
          "replay: --window {}: expected A:B (ops A to B, B >= A) or A: (from A to the end)",
          options.window));
      return kExitUsage;
    }
    if (!options.command.empty()) {
      PrintError("replay: --window replays from the trace alone: give no command");
      return kExitUsage;
    }
    ReplayWindowOptions replay;
    replay.trace = options.trace;
    replay.window = *window;
    replay.repeat = options.repeat > 0 ? options.repeat : 5;
    replay.try_deterministic = options.try_deterministic;
    replay.force = options.force;
    return RunReplayWindow(replay);
  }
  if (options.op) {
    ReplayOpOptions op;
    op.trace = options.trace;
    op.op = *options.op;
    op.repeat = options.repeat > 0 ? options.repeat : 20;
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
  app->add_option("--op", options->op, "Standalone replay of op N (no CMD)")->check(WholeNumber(0));
  app->add_option("--window", options->window,
                  "Window replay of ops A..B from TRACE alone (A:B, or A: to the end; no CMD); "
                  "TRACE recorded with `record --window`");
  app->add_option("--repeat", options->repeat,
                  "--op: how many times to run it (default 20); --window: how many times to "
                  "run each op of the window (default 5)")
      ->check(WholeNumber(1, 100000));
  app->add_flag("--try-deterministic", options->try_deterministic,
                "--op: also run every deterministic alternative algorithm (cuRAND: each fixed "
                "ordering); --window: run the varying op's stable alternative and go on");
  app->add_flag("--force", options->force,
                "Replay even when TRACE was recorded from another program (or, with --op or "
                "--window, on another GPU or driver: a trace contains code)");
  app->add_option("command", options->command, "The program and its arguments, after --");
  return {app, [options] { return RunReplay(*options); }};
}

}  // namespace ndt::tools
