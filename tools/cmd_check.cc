// `ndtrace check [-n RUNS] [-o DIR] [digest options] [--deterministic | --pin TRACE] -- CMD...`: is CMD deterministic on the GPU,
// and if not, which op breaks it and why. Runs CMD RUNS times under the tracer into DIR, diffs
// every run against the first, prints one report and a one-line verdict.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "replayer/bisect.h"
#include "replayer/determinism_cost.h"
#include "replayer/diff_html.h"
#include "replayer/diff_report.h"
#include "replayer/python_stacks.h"
#include "replayer/run_set.h"
#include "replayer/trace_diff.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/traced_run.h"

namespace ndt::tools {

namespace {

struct CheckOptions {
  int runs = 6;
  int narrow_runs = 8;
  std::string directory;
  DigestOptions digests;
  PolicyOptions policy;
  PythonOptions python;
  int progress_every = 10;  // seconds; 0: no progress while a run goes on
  std::string html;         // --html FILE: the report as a page too
  bool no_cost = false;     // --no-cost: no plain run to measure what the policy costs
  bool allow_damage = false;  // compare what is intact in a damaged trace
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

// "exit status 1", "killed by signal 11 (SIGSEGV)".
std::string ExitText(int exit_code) {
  if (exit_code > 128 && exit_code < 128 + 65) {
    const char* name = sigabbrev_np(exit_code - 128);
    return fmt::format("killed by signal {}{}", exit_code - 128,
                       name != nullptr ? fmt::format(" (SIG{})", name) : std::string());
  }
  return fmt::format("exit status {}", exit_code);
}

// At most `bytes` of the program's output in `log`: its start, or with `tail` its end ("" when
// it cannot be read).
std::string ReadLogPart(const std::filesystem::path& log, long bytes, bool tail) {
  std::FILE* file = std::fopen(log.c_str(), "rb");
  if (file == nullptr) return {};
  std::string text(static_cast<size_t>(bytes), '\0');
  if (tail && std::fseek(file, -bytes, SEEK_END) != 0) std::rewind(file);
  text.resize(std::fread(text.data(), 1, text.size(), file));
  std::fclose(file);
  return text;
}

// The last `count` non-empty lines of the program's output in `log` (read from its last 16 KiB,
// each cut at 240 bytes): what a failing program said last, usually why it failed.
std::vector<std::string> LastLines(const std::filesystem::path& log, size_t count) {
  const std::string text = ReadLogPart(log, 16 * 1024, true);
  std::vector<std::string> lines;
  size_t end = text.size();
  while (end > 0 && lines.size() < count) {
    const size_t newline = text.rfind('\n', end - 1);
    const size_t begin = newline == std::string::npos ? 0 : newline + 1;
    std::string line = text.substr(begin, std::min<size_t>(end - begin, 240));
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(std::move(line));
    if (newline == std::string::npos) break;
    end = newline;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

// `line` with what differs in every run of a reproducible program masked: times of day,
// durations and rates ("took 0.59 ms", "12.3it/s", "00:01<00:03"), object addresses.
std::string MaskVaryingText(const std::string& line) {
  static const std::regex kTimestamp(R"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}([.,]\d+)?)");
  static const std::regex kClock(R"(\d+:\d{2}(:\d{2})?([.,]\d+)?)");
  static const std::regex kAddress(R"(0x[0-9a-fA-F]{6,})");
  static const std::regex kDuration(
      R"([-+]?\d+(\.\d+)?([eE][-+]?\d+)?\s*(seconds|secs|sec|samples/s|tokens/s|img/s|it/s|s/it|min|ms|us|µs|ns|s)\b)");
  if (line.find_first_of("0123456789") == std::string::npos) return line;
  std::string masked = std::regex_replace(line, kTimestamp, "<time>");
  masked = std::regex_replace(masked, kClock, "<time>");
  masked = std::regex_replace(masked, kAddress, "<address>");
  return std::regex_replace(masked, kDuration, "<duration>");
}

// Where the program's output in `log_b` differs from `log_a`, compared as sets of lines (the
// order of lines from several threads or processes varies), ndtrace's own lines left out and
// times, durations and addresses masked (MaskVaryingText): the first line of each that the
// other lacks ("(none)" when all its lines are in the other), or nullopt when they agree.
// Reads the first MiB of each.
std::optional<std::pair<std::string, std::string>> OutputDifference(
    const std::filesystem::path& log_a, const std::filesystem::path& log_b) {
  const auto read_lines = [](const std::filesystem::path& log) {
    std::vector<std::string> lines;
    const std::string text = ReadLogPart(log, 1 << 20, false);
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(begin, end - begin);
      if (!line.starts_with("ndtrace")) lines.push_back(MaskVaryingText(line));
      begin = end + 1;
    }
    return lines;
  };
  const std::vector<std::string> a = read_lines(log_a);
  const std::vector<std::string> b = read_lines(log_b);
  std::vector<std::string> sorted_a = a, sorted_b = b;
  std::sort(sorted_a.begin(), sorted_a.end());
  std::sort(sorted_b.begin(), sorted_b.end());
  if (sorted_a == sorted_b) return std::nullopt;
  // The first line of `lines`, in its order, that `other` (sorted) holds fewer times.
  const auto first_extra = [](const std::vector<std::string>& lines,
                              const std::vector<std::string>& sorted,
                              const std::vector<std::string>& other) -> std::string {
    for (const std::string& line : lines) {
      const auto mine = std::equal_range(sorted.begin(), sorted.end(), line);
      const auto theirs = std::equal_range(other.begin(), other.end(), line);
      if (theirs.second - theirs.first < mine.second - mine.first) return line.substr(0, 240);
    }
    return "(none)";
  };
  return std::make_pair(first_extra(a, sorted_a, sorted_b), first_extra(b, sorted_b, sorted_a));
}

// What one run did, as the verdict needs it.
struct RunFacts {
  std::string trace;
  int exit_code = 0;
  uint64_t ops = 0;
  uint64_t lifecycle_ops = 0;     // of them, streams and events created or destroyed: not compared
  uint64_t failed_calls = 0;      // ops whose call returned an error, in every process
  std::string first_failed_call;  // "op N NAME returned S"
  uint64_t refused_launches = 0;  // of them, kernel and graph launches: no work was done
};

// The ops and failed calls of every process of the run whose main trace path is `trace`.
StatusOr<RunFacts> ReadRunFacts(const std::string& trace, uint64_t* processes) {
  StatusOr<std::vector<replay::ProcessTrace>> found = replay::FindProcessTraces(trace);
  if (!found.ok()) return found.status();
  RunFacts facts;
  facts.trace = trace;
  *processes = 0;
  for (const replay::ProcessTrace& process : *found) {
    StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(process.path);
    if (!reader.ok()) return reader.status();
    ++*processes;
    (*reader)->PassOver(~format::RecordTypeBit<format::OpRecord>());  // ops are all it counts
    (*reader)->ReadAhead(true);
    format::Record record;
    while ((*reader)->Next(&record)) {
      const auto* op = std::get_if<format::OpRecord>(&record);
      if (op == nullptr) continue;
      ++facts.ops;
      if (format::IsLifecycleOp(*op)) ++facts.lifecycle_ops;
      if (op->status == 0) continue;
      if (op->kind == format::OpKind::kKernelLaunch || op->kind == format::OpKind::kGraphLaunch) {
        ++facts.refused_launches;
      }
      if (facts.failed_calls++ == 0) {
        facts.first_failed_call =
            fmt::format("op {} {} returned {}", op->sequence, op->name, op->status);
      }
    }
  }
  return facts;
}

// How many ops the agreeing runs held: "123 ops each", or, where thread timing made some runs
// create and destroy more streams and events than others (a pool grown on demand: ops no run is
// compared on), "119 to 123 ops a run, 91 compared in each; the others create or destroy ...".
std::string OpCountText(const std::vector<RunFacts>& runs) {
  const auto [fewest, most] = std::minmax_element(
      runs.begin(), runs.end(), [](const RunFacts& x, const RunFacts& y) { return x.ops < y.ops; });
  if (fewest->ops == most->ops) return fmt::format("{} ops each", fewest->ops);
  const auto compared = [](const RunFacts& run) { return run.ops - run.lifecycle_ops; };
  const auto [least_compared, most_compared] = std::minmax_element(
      runs.begin(), runs.end(),
      [&](const RunFacts& x, const RunFacts& y) { return compared(x) < compared(y); });
  const std::string count =
      compared(*least_compared) == compared(*most_compared)
          ? fmt::format("{} compared in each", compared(*least_compared))
          : fmt::format("{} to {} compared", compared(*least_compared), compared(*most_compared));
  return fmt::format(
      "{} to {} ops a run, {}; the others create or destroy streams and events, as many as "
      "thread timing asked for, and are not compared",
      fewest->ops, most->ops, count);
}

// "; in aten::index_add_ (module Net.embed)" when NVTX ranges named the divergent op's PyTorch
// op or module; else the innermost range ("; in \"reduce\""); else nothing.
std::string FrameworkOpText(const replay::Divergence& d) {
  if (!d.ranges || d.ranges->path.empty()) return "";
  const format::RangeContext& ranges = *d.ranges;
  if (ranges.framework_op.empty() && ranges.module.empty()) {
    return "; in \"" + ranges.path.back() + "\"";
  }
  std::string text = "; in " + (ranges.framework_op.empty() ? "module " + ranges.module
                                                            : ranges.framework_op);
  if (!ranges.framework_op.empty() && !ranges.module.empty()) {
    text += " (module " + ranges.module + ")";
  }
  return text;
}

// One line naming the first divergence, for the verdict: the same facts the report shows.
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
  line += FrameworkOpText(d);
  // "cublasSgemm_v2 at train.py:42 in forward", "cublasSgemm_v2; no Python stack: ...".
  const auto python = [&](const format::PythonStackRecord& stack) {
    line += (stack.status == format::PythonStackStatus::kCaptured ? " " : "; ") +
            PythonStackWords(stack);
  };
  if (d.root && d.root_python_stack) {
    python(*d.root_python_stack);
  } else if (!d.root && d.python_stack) {
    python(*d.python_stack);
  }
  if (d.hint && d.hint->framework_op.rfind('(', 0) != 0) line += "; " + d.hint->framework_op;
  if (std::find(d.evidence.begin(), d.evidence.end(), "outputs identical in both runs") !=
      d.evidence.end()) {
    line += "; its outputs were identical in both runs this time";
  }
  return line + ")";
}

// The smallest share of runs a divergence must show in to be seen, with 95 % confidence, by
// `runs` runs that all agreed (each later run compared with the first).
double DetectableShare(int runs) {
  return 1.0 - std::pow(0.05, 1.0 / std::max(runs - 1, 1));
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
  if (options.narrow_runs < 0 || options.narrow_runs > 100) {
    PrintError(fmt::format("check: --narrow-runs must be between 0 and 100 (got {})",
                           options.narrow_runs));
    return kExitUsage;
  }
  if (options.progress_every < 0) {
    PrintError(fmt::format("check: --progress-every must be 0 or more seconds (got {})",
                           options.progress_every));
    return kExitUsage;
  }
  if (!ApplyDigestOptions("check", options.digests)) return kExitUsage;
  if (!ApplyPolicyOptions("check", options.policy)) return kExitUsage;
  ApplyPythonOptions(options.python);
  const std::filesystem::path directory =
      options.directory.empty() ? DefaultDirectory() : options.directory;
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    PrintError(fmt::format("check: cannot create {}: {}", directory.string(), error.message()));
    return kExitUsage;
  }

  // Runs until one differs from run 1 (in exit status or in its trace), at most options.runs;
  // a program that failed in run 1 only twice (the verdict is that it fails, or that it does
  // not fail alike).
  const std::string command = CommandText(options.command);
  std::vector<RunFacts> runs;
  std::optional<replay::RunDiff> diverged;  // the first run that differs from run 1
  std::optional<replay::RunDiff> agreed;    // else the last run compared: identical
  std::string exit_difference;
  uint64_t cut_off_ops = 0;  // of failing runs: ops at lane ends made in one run only
  int limit = options.runs;
  for (int i = 1; i <= limit && !diverged && exit_difference.empty(); ++i) {
    const std::string trace = (directory / fmt::format("run-{}.ndt", i)).string();
    const std::string log = (directory / fmt::format("run-{}.log", i)).string();
    fmt::print(stderr, "ndtrace check: run {} (at most {}): {}\n", i, limit, command);
    replay::RemoveProcessTraces(trace);
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
      fmt::print(stderr, "ndtrace check: run {}: running for {} s, {}\n", i, running.count(),
                 !ops ? std::string("no CUDA call yet")
                 : processes > 1
                     ? fmt::format("{} ops recorded so far by {} processes", *ops, processes)
                     : fmt::format("{} ops recorded so far", *ops));
    };
    StatusOr<TracedRun> run = RunTraced("check", options.command, trace, log, progress);
    if (!run.ok()) {
      PrintError(run.status().message());
      return kExitUsage;
    }
    uint64_t processes = 0;
    StatusOr<RunFacts> facts = ReadRunFacts(trace, &processes);
    if (!facts.ok()) {
      PrintError(fmt::format("check: run {} left no readable trace ({}; output in {}): {}", i,
                             ExitText(run->exit_code), log, facts.status().message()));
      return kExitUsage;
    }
    facts->exit_code = run->exit_code;
    fmt::print(stderr, "ndtrace check: run {}: {}, {} ops recorded{}{}\n", i,
               ExitText(run->exit_code), facts->ops,
               processes > 1 ? fmt::format(" by {} processes", processes) : std::string(),
               facts->failed_calls != 0 ? fmt::format(", {} failed CUDA calls", facts->failed_calls)
                                        : std::string());
    runs.push_back(*facts);
    if (i == 1) {
      if (facts->exit_code != 0 || facts->refused_launches != 0) limit = 2;
      continue;
    }
    if (run->exit_code != runs.front().exit_code) {
      exit_difference = fmt::format("the program's {} in run {}, {} in run 1",
                                    ExitText(run->exit_code), i, ExitText(runs.front().exit_code));
    }
    StatusOr<replay::RunDiff> diff = replay::DiffRuns(runs.front().trace, trace);
    if (!diff.ok()) {
      PrintError(diff.status().message());
      return kExitUsage;
    }
    if (ReportRunDamage(*diff, options.allow_damage) != kExitOk) {
      PrintError(fmt::format("check: a trace of run 1 or run {} is damaged; no verdict "
                             "(--allow-damage compares what is intact)",
                             i));
      return kExitUsage;
    }
    // A program that fails alike in every run is cut short where it fails: a thread still
    // issuing work then got further in one run than in another. Ops past the other run's last
    // op in their lane are where it stopped, not a divergence of what both runs did.
    const bool cut_alike = runs.front().exit_code != 0 && exit_difference.empty() &&
                           diff->differs_only_at_lane_tails();
    if (cut_alike) cut_off_ops = std::max(cut_off_ops, diff->lane_tail_ops());
    if (!diff->identical() && !cut_alike) {
      diverged = std::move(diff).value();
    } else {
      agreed = std::move(diff).value();
    }
  }
  std::optional<replay::DeterminismCost> cost;  // measured below
  // --html: the page of the comparison the verdict rests on, with the verdict line.
  const auto write_page = [&](const replay::RunDiff& diff, const std::string& verdict) {
    if (options.html.empty()) return true;
    replay::PageText text;
    text.title = "ndtrace check: " + command;
    text.verdict = verdict;
    text.cost = cost;
    if (Status written = WritePage(options.html, replay::RunDiffPage(diff, text)); !written.ok()) {
      PrintError("check: " + written.message());
      return false;
    }
    fmt::print(stderr, "ndtrace check: report page written to {}\n", options.html);
    return true;
  };

  // What determinism costs: with a policy, one more run without it, its GPU time against run 1's
  // (replay::MeasureDeterminismCost). Only when run 1 succeeded and recorded GPU times.
  const bool policy = options.policy.deterministic || !options.policy.pin.empty();
  if (policy && !options.no_cost && !options.digests.no_gpu_time &&
      runs.front().exit_code == 0) {
    const std::string trace = (directory / "plain.ndt").string();
    const std::string log = (directory / "plain.log").string();
    fmt::print(stderr, "ndtrace check: one run without the policy, to measure what it costs: {}\n",
               command);
    replay::RemoveProcessTraces(trace);
    const auto saved = [](const char* name) -> std::optional<std::string> {
      const char* value = std::getenv(name);
      return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
    };
    const std::optional<std::string> policy_env = saved("NDTRACE_POLICY");
    const std::optional<std::string> pin_env = saved("NDTRACE_PIN");
    unsetenv("NDTRACE_POLICY");
    unsetenv("NDTRACE_PIN");
    StatusOr<TracedRun> plain = RunTraced("check", options.command, trace, log, RunProgress{});
    if (policy_env) setenv("NDTRACE_POLICY", policy_env->c_str(), 1);
    if (pin_env) setenv("NDTRACE_PIN", pin_env->c_str(), 1);
    if (!plain.ok()) {
      PrintWarning("cost of determinism not measured: " + plain.status().message());
    } else if (StatusOr<replay::DeterminismCost> measured =
                   replay::MeasureDeterminismCost(runs.front().trace, trace);
               measured.ok()) {
      cost = std::move(measured).value();
    } else {
      PrintWarning("cost of determinism not measured: " + measured.status().message());
    }
  }

  // A stand-in result is never presented as a GPU result.
  StatusOr<std::vector<replay::ProcessTrace>> first_run =
      replay::FindProcessTraces(runs.front().trace);
  if (first_run.ok()) {
    if (auto reader = format::TraceReader::Open(first_run->front().path); reader.ok()) {
      const auto& gpus = (*reader)->header().gpus;
      if (!gpus.empty() && gpus.front().simulated) {
        fmt::print("note: simulated device (no GPU found): these runs used ndtrace's stand-in "
                   "device, a CPU implementation of CUDA; results say nothing about a GPU\n");
      }
    }
  }

  if (cost) fmt::print("{}", replay::RenderCostText(*cost));
  const RunFacts& first = runs.front();
  const int made = static_cast<int>(runs.size());
  // Runs whose GPU work agreed may still have printed other results: the program's output,
  // compared with run 1's, says whether the divergence lies where ndtrace does not look.
  bool any_op = false;
  for (const RunFacts& run : runs) any_op = any_op || run.ops != 0;
  std::string output_differs;
  if (!diverged && exit_difference.empty()) {
    for (int i = 2; i <= made && output_differs.empty(); ++i) {
      const auto difference =
          OutputDifference(directory / "run-1.log", directory / fmt::format("run-{}.log", i));
      if (!difference) continue;
      output_differs = fmt::format("the program's output differed between run 1 and run {}", i);
      fmt::print(
          "note: {} (compared as sets of lines, ndtrace's own left out):\n  run 1: {}\n  run "
          "{}: {}\n  = ndtrace compares the GPU work, and {}; if those lines are results (a "
          "loss, a checksum), the runs diverged on the CPU (data order, a CPU RNG, Python's "
          "hash order) or in work ndtrace does not record\n",
          output_differs, difference->first, i, difference->second,
          any_op ? "it agreed" : "there was none");
    }
  }
  if (!any_op && first.exit_code == 0 && first.refused_launches == 0) {
    // Nothing was compared: identical empty traces say nothing about the program (one that
    // failed alike in every run is told so below).
    PrintError(fmt::format(
        "check: no verdict: no run made a GPU call ndtrace records ({} runs, 0 ops each): the "
        "program did not use the GPU here (PyTorch runs on the CPU when "
        "torch.cuda.is_available() is false: no GPU, or a CPU-only build){}; output in {}",
        made, output_differs.empty() ? std::string() : "; " + output_differs,
        (directory / "run-1.log").string()));
    return kExitUsage;
  }
  if (!diverged && exit_difference.empty()) {
    const std::string failed =
        first.failed_calls == 0
            ? std::string()
            : fmt::format("; {} CUDA call(s) failed, the same in every run (first: {})",
                          first.failed_calls, first.first_failed_call);
    // A failing program is not called deterministic, even when it fails the same way: nor
    // is one whose launches the device refused (their work was never done).
    if (first.exit_code != 0 || first.refused_launches != 0) {
      const std::string alike =
          cut_off_ops == 0
              ? fmt::format("otherwise bitwise-identical ({})", OpCountText(runs))
              : fmt::format(
                    "bitwise-identical up to where each stopped ({} ops in run 1; {} op(s) at "
                    "the ends of threads' or streams' work made in one run only: cut off by "
                    "the failure)",
                    first.ops, cut_off_ops);
      const std::string verdict = fmt::format(
          "ndtrace check: the program failed in every run ({}): {} runs, {}{}; its output is "
          "in {}",
          first.exit_code != 0
              ? ExitText(first.exit_code)
              : fmt::format("{} launch(es) refused by the device", first.refused_launches),
          made, alike, failed, (directory / "run-1.log").string());
      const std::vector<std::string> said = LastLines(directory / "run-1.log", 3);
      if (!said.empty()) {
        fmt::print("the program's output in run 1 ends with:\n");
        for (const std::string& line : said) fmt::print("  | {}\n", line);
      }
      fmt::print("{}\n", verdict);
      if (agreed && !write_page(*agreed, verdict)) return kExitUsage;
      return kExitProgramFailed;
    }
    const std::string verdict = fmt::format(
        "ndtrace check: deterministic: {} runs gave bitwise-identical results ({}{}); a "
        "divergence showing in at least {:.0f} % of runs would have been seen "
        "(95 % confidence){}; traces in {}",
        made, OpCountText(runs), failed, 100.0 * DetectableShare(made),
        output_differs.empty() ? std::string() : "; but " + output_differs + ": see the note above",
        directory.string());
    fmt::print("{}\n", verdict);
    if (agreed && !write_page(*agreed, verdict)) return kExitUsage;
    return kExitOk;
  }

  std::string where;
  if (diverged) {
    const auto* first_process = diverged->first_diverged();
    // Narrowing: a report that names no op yet (propagated, uncovered) is followed up with
    // more runs until it does (replay::Narrow), following that process in a run of several.
    if (first_process != nullptr && first_process->second.first_divergence &&
        !replay::NamesTheOp(*first_process->second.first_divergence) && options.narrow_runs > 0) {
      const std::string key = first_process->first;
      auto& narrowed_report =
          std::find_if(diverged->processes.begin(), diverged->processes.end(),
                       [&](const auto& process) { return &process == first_process; })
              ->second;
      fmt::print(stderr, "ndtrace check: run {} differs from run 1 at {}; narrowing it down\n",
                 made, DivergenceLine(first_process->second));
      replay::BisectOptions narrow;
      narrow.max_runs = options.narrow_runs;
      narrow.runs_per_step = 3;
      narrow.confirm_runs = 10;
      StatusOr<replay::NarrowResult> narrowed = replay::Narrow(
          narrow, first_process->second,
          MakeRunProgram("check", options.command, directory.string(), "narrow",
                         key == "main" ? "" : key, first_process->second.path_a),
          [](const std::string& line) { fmt::print(stderr, "ndtrace check: {}\n", line); });
      if (narrowed.ok()) {
        narrowed_report = narrowed->report;
        for (const std::string& step : narrowed->steps) {
          narrowed_report.notes.push_back("narrowing: " + step);
        }
        if (!narrowed->named) {
          narrowed_report.notes.push_back(fmt::format(
              "narrowing: {} more runs did not name one op; `ndtrace bisect{}` searches further",
              narrowed->runs, key == "main" ? "" : fmt::format(" --process '{}'", key)));
        }
      } else {
        PrintWarning("narrowing failed: " + narrowed.status().message());
      }
      first_process = diverged->first_diverged();
    }
    if (first_process != nullptr) {
      for (auto& [key, report] : diverged->processes) {
        if (&report != &first_process->second) continue;
        const std::string trace_a = report.path_a;
        TakePythonStacks("check", options.command, directory, key, trace_a, &report);
      }
    }
    fmt::print("{}", replay::RenderRunDiffText(*diverged, ::isatty(STDOUT_FILENO)));
    where = first_process != nullptr ? (diverged->single() ? "" : first_process->first + ", ") +
                                           DivergenceLine(first_process->second)
                                     : std::string("a process that ran in one run only");
  }
  if (!exit_difference.empty()) {
    fmt::print("error[exit_status]: {}\n", exit_difference);
    where = where.empty() ? exit_difference
                          : exit_difference + "; first op-level difference at " + where;
  }
  const std::string verdict = fmt::format(
      "ndtrace check: NOT deterministic: run {} differs from run 1 ({} runs made): {}; "
      "traces in {}",
      made, made, where, directory.string());
  fmt::print("{}\n", verdict);
  const std::optional<replay::RunDiff>& shown = diverged ? diverged : agreed;
  if (shown && !write_page(*shown, verdict)) return kExitUsage;
  return kExitFinding;
}

}  // namespace

Command AddCheckCommand(CLI::App& parent) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* app = parent.add_subcommand(
      "check",
      "Run CMD several times under the tracer and say whether its GPU work is "
      "bitwise reproducible; if not, name the first divergent op and why. "
      "Exit 0 deterministic, 1 not, 2 error, 4 the program failed in every run.");
  app->add_option("-n,--runs", options->runs,
                  "At most this many runs (default 6); stops at the first that differs")
      ->check(WholeNumber(2, 100));
  app->add_option("--narrow-runs", options->narrow_runs,
                  "When the first report names no op (propagated, uncovered), at most this many "
                  "more runs to narrow it down to one (default 8; 0: none)")
      ->check(WholeNumber(0, 100));
  app->add_option("-o,--output", options->directory,
                  "Directory for the traces and program logs (default ndtrace-check-<time>)");
  app->add_option("--html", options->html,
                  "also write the report as one self-contained HTML page (tools/README.md)");
  app->add_flag("--no-cost", options->no_cost,
                "with --deterministic or --pin, do not make the one more run without the policy "
                "that measures what determinism costs in GPU time");
  app->add_option("--progress-every", options->progress_every,
                  "While a run goes on, say every S seconds how many ops it has recorded "
                  "(default 10; 0: only when it ends)")
      ->check(WholeNumber(0, 86400));
  app->add_flag("--allow-damage", options->allow_damage,
                "When a run's trace is damaged, compare what is intact (the damage is printed "
                "as warnings) instead of stopping with exit 2");
  AddDigestOptions(app, &options->digests);
  AddPolicyOptions(app, &options->policy);
  AddPythonOptions(app, &options->python);
  app->add_option("command", options->command, "The program and its arguments, after --")
      ->required();
  return {app, [options] { return RunCheck(*options); }};
}

}  // namespace ndt::tools
