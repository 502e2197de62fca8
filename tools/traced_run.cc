#include "tools/traced_run.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "formats/writer_summary.h"
#include "replayer/python_stacks.h"
#include "replayer/run_set.h"
#include "tools/cli_support.h"

extern char** environ;

namespace ndt::tools {
namespace {

// Whether `text` is `A:B` or `A:` with A <= B (decimal op sequences).
bool ValidWindow(std::string_view text) {
  const auto parse = [](std::string_view digits, uint64_t* value) {
    const char* end = digits.data() + digits.size();
    const auto [stop, error] = std::from_chars(digits.data(), end, *value);
    return !digits.empty() && error == std::errc() && stop == end;  // no overflow
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  uint64_t first = 0, last = UINT64_MAX;
  if (!parse(text.substr(0, colon), &first)) return false;
  const std::string_view rest = text.substr(colon + 1);
  if (!rest.empty() && !parse(rest, &last)) return false;
  return first <= last;
}

// NVTX_INJECTION64_PATH and the variable that chains the injection it named before.
bool IsNvtxVariable(std::string_view entry) {
  return entry.rfind("NVTX_INJECTION64_PATH=", 0) == 0 || entry.rfind("NDTRACE_NVTX_NEXT=", 0) == 0;
}

// Makes the tracer the program's NVTX injection library (tracer/nvtx.h). An injection library
// the environment already names (Nsight's) is chained: the tracer loads it and passes every
// NVTX call on to it, so both see the ranges.
void AddNvtxInjection(const std::string& library, std::vector<std::string>* environment) {
  const char* current = std::getenv("NVTX_INJECTION64_PATH");
  const char* chained = std::getenv("NDTRACE_NVTX_NEXT");
  std::error_code error;
  const bool current_is_ours = current != nullptr && *current != '\0' &&
                               std::filesystem::equivalent(current, library, error);
  std::string next;
  if (current != nullptr && *current != '\0' && !current_is_ours) {
    next = current;
  } else if (current_is_ours && chained != nullptr) {
    next = chained;  // ndtrace under ndtrace: keep the chain it was given
  }
  if (!next.empty()) environment->push_back("NDTRACE_NVTX_NEXT=" + next);
  environment->push_back("NVTX_INJECTION64_PATH=" + library);
}

// Puts the Python shim's directory first on PYTHONPATH (the program's own entries after it),
// unless NDTRACE_PYTHON=0. Every command gets it, so Python started by a shell script or a
// launcher (torchrun) is covered too; the shim does nothing in a Python that never imports
// torch.
void AddPythonShim(std::vector<std::string>* environment) {
  const char* enabled = std::getenv("NDTRACE_PYTHON");
  const std::string shim =
      enabled != nullptr && std::string_view(enabled) == "0" ? "" : PythonShimDirectory();
  const char* current = std::getenv("PYTHONPATH");
  const bool has_current = current != nullptr && *current != '\0';
  if (shim.empty()) {
    if (current != nullptr) environment->push_back(std::string("PYTHONPATH=") + current);
    return;
  }
  environment->push_back("PYTHONPATH=" + shim + (has_current ? ":" + std::string(current) : ""));
  environment->push_back("NDTRACE_PYTHON_SHIM=" + shim);  // its frames leave Python stacks
}

}  // namespace

void AddDigestOptions(CLI::App* app, DigestOptions* options) {
  app->add_option("--digest-every", options->every,
                  "Digest all live device memory after every N ops (synchronises the host)")
      ->check(WholeNumber(1));
  app->add_flag("--digest-sync", options->sync,
                "Digest all live device memory at every host synchronisation");
  app->add_option("--digest-window", options->window,
                  "A:B or A: (op sequences, inclusive): digest the allocations each kernel "
                  "launch, memset and device-to-device copy in the window references, before "
                  "and after it (synchronises the host)");
  app->add_flag("--no-exit-digest", options->no_exit,
                "Do not digest the live device memory at exit");
  app->add_flag("--no-gpu-time", options->no_gpu_time,
                "Do not take the GPU start and end of kernels, copies and memsets from CUPTI");
}

bool ApplyDigestOptions(const std::string& context, const DigestOptions& options) {
  if (!options.window.empty() && !ValidWindow(options.window)) {
    PrintError(fmt::format("{}: --digest-window must be A:B or A: with A <= B (got '{}')", context,
                           options.window));
    return false;
  }
  if (options.every != 0) setenv("NDTRACE_DIGEST_EVERY", std::to_string(options.every).c_str(), 1);
  if (options.sync) setenv("NDTRACE_DIGEST_SYNC", "1", 1);
  if (!options.window.empty()) setenv("NDTRACE_DIGEST_WINDOW", options.window.c_str(), 1);
  if (options.no_exit) setenv("NDTRACE_DIGEST_EXIT", "0", 1);
  if (options.no_gpu_time) setenv("NDTRACE_GPU_TIME", "0", 1);
  return true;
}

void AddPolicyOptions(CLI::App* app, PolicyOptions* options) {
  CLI::Option* deterministic = app->add_flag(
      "--deterministic", options->deterministic,
      "Replace nondeterministic library choices (cuDNN algorithms and engines, cuBLAS atomics "
      "and split-K, cuRAND dynamic ordering) and set CUBLAS_WORKSPACE_CONFIG and NCCL_* "
      "when unset");
  CLI::Option* pin = app->add_option(
      "--pin", options->pin,
      "Force the library choices (and cuRAND seeds and offsets, NCCL's algorithm variables) "
      "recorded in TRACE");
  deterministic->excludes(pin);
}

bool ApplyPolicyOptions(const std::string& context, const PolicyOptions& options) {
  if (!options.pin.empty()) {
    StatusOr<std::unique_ptr<format::TraceReader>> reader =
        format::TraceReader::Open(options.pin);
    if (!reader.ok()) {
      PrintError(fmt::format("{}: --pin: {}", context, reader.status().message()));
      return false;
    }
    // Read to its end, as the tracer will: a damaged reference is refused here, with the
    // damage named, before the program starts.
    ReadWholeTrace(**reader);
    if (ReportTraceState(options.pin, **reader) != kExitOk) {  // an incomplete one is a warning
      PrintError(fmt::format("{}: --pin: {} is damaged; not used", context, options.pin));
      return false;
    }
    std::error_code error;
    const std::string absolute = std::filesystem::absolute(options.pin, error).string();
    setenv("NDTRACE_PIN", (error ? options.pin : absolute).c_str(), 1);
  }
  if (options.deterministic) setenv("NDTRACE_POLICY", "deterministic", 1);
  return true;
}

bool HasSeparator(std::string_view subcommand) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bool after_subcommand = false;
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    const std::string_view arg(all.data() + start, end - start);
    if (after_subcommand && arg == "--") return true;
    if (arg == subcommand) after_subcommand = true;
    start = end + 1;
  }
  return false;
}

void AddPythonOptions(CLI::App* app, PythonOptions* options) {
  app->add_flag("--no-python", options->no_python,
                "Do not put ndtrace's Python shim on PYTHONPATH (it names PyTorch ops and "
                "modules in NVTX ranges when the program imports torch)");
  app->add_flag("--tensor-digests", options->tensor_digests,
                "Record each PyTorch op with digests of exactly its input and output tensors "
                "on a PyTorch built with CUDA too (the Python shim tells the tracer their "
                "storage, at a Python call per op; on by default where PyTorch has no CUDA)")
      ->excludes("--no-python");
}

void ApplyPythonOptions(const PythonOptions& options) {
  if (options.no_python) setenv("NDTRACE_PYTHON", "0", 1);
  if (options.tensor_digests) setenv("NDTRACE_TENSOR_DIGESTS", "1", 1);
}

std::string PythonShimDirectory() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path beside = self.parent_path() / "python";
    if (std::filesystem::exists(beside / "sitecustomize.py", error)) return beside.string();
  }
  const std::string source = NDT_PYTHON_SHIM_DIR;
  return !source.empty() && access((source + "/sitecustomize.py").c_str(), R_OK) == 0 ? source
                                                                                     : "";
}

std::string TracerLibrary() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path beside = self.parent_path() / "libndtrace.so";
    if (std::filesystem::exists(beside, error)) return beside.string();
  }
  const std::string built = NDT_TRACER_LIBRARY;
  return !built.empty() && access(built.c_str(), R_OK) == 0 ? built : std::string();
}

StatusOr<TracedRun> RunTraced(const std::string& context, const std::vector<std::string>& command,
                              const std::string& trace_path, const std::string& log_path,
                              const RunProgress& progress) {
  const std::string library = TracerLibrary();
  if (library.empty()) {
    return Status::Error(context + ": cannot find libndtrace.so beside ndtrace or in its build");
  }
  std::vector<std::string> environment;
  std::string preload = library;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (text.rfind("LD_PRELOAD=", 0) == 0) {
      if (text.size() > 11) preload += ":" + std::string(text.substr(11));
    } else if (text.rfind("NDTRACE_OUTPUT=", 0) != 0 &&
               text.rfind("NDTRACE_LAUNCHER_PID=", 0) != 0 && !IsNvtxVariable(text) &&
               text.rfind("PYTHONPATH=", 0) != 0) {
      environment.emplace_back(text);
    }
  }
  environment.push_back("LD_PRELOAD=" + preload);
  AddNvtxInjection(library, &environment);
  AddPythonShim(&environment);
  // The process spawned here writes `trace_path`; the others of its run write companions.
  environment.push_back("NDTRACE_LAUNCHER_PID=" + std::to_string(getpid()));
  if (!trace_path.empty()) {
    // Absolute, so that a program that changes directory still writes it here.
    std::error_code error;
    const std::string absolute = std::filesystem::absolute(trace_path, error).string();
    environment.push_back("NDTRACE_OUTPUT=" + (error ? trace_path : absolute));
  }
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log_path.empty()) {
    // Not O_CLOEXEC: it is the program's stdout. (Closed at exec, fd 1 would go to the next
    // file the program opens: the trace.)
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t child = 0;
  const int spawn_error =
      posix_spawnp(&child, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) {
    return Status::Error(fmt::format("{}: cannot run {}: {}", context, args[0],
                                     std::strerror(spawn_error)));
  }
  int wait_status = 0;
  const auto started = std::chrono::steady_clock::now();
  auto next_report = started + progress.every;
  for (;;) {
    const pid_t waited = waitpid(child, &wait_status, progress.every.count() > 0 ? WNOHANG : 0);
    if (waited == child) break;
    if (waited < 0 && errno != EINTR) {
      return Status::Error(fmt::format("{}: waitpid: {}", context, std::strerror(errno)));
    }
    if (waited == 0) {  // still running
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_report) {
        progress.report(std::chrono::duration_cast<std::chrono::seconds>(now - started));
        next_report += progress.every;
      }
    }
  }
  TracedRun run;
  run.pid = child;
  run.exit_code = WIFEXITED(wait_status)     ? WEXITSTATUS(wait_status)
                  : WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status)
                                             : 255;
  return run;
}

std::optional<uint64_t> OpsSoFar(const std::string& path) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return std::nullopt;
  uint64_t ops = 0;
  for (const format::ChunkInfo& chunk : (*reader)->chunks()) {
    if (chunk.kind == format::ChunkKind::kRecords && chunk.first_op != UINT64_MAX) {
      ops = std::max(ops, chunk.last_op + 1);  // ops are numbered densely from 0
    }
  }
  return ops;
}

StatusOr<TraceSummary> SummarizeTrace(const std::string& path) {
  // A closed trace carries the writer's totals: read them alone, whatever the trace's length.
  StatusOr<std::optional<format::WriterSummary>> totals = format::ReadWriterSummary(path);
  if (!totals.ok()) return totals.status();
  if (totals->has_value()) {
    std::error_code error;
    const uintmax_t bytes = std::filesystem::file_size(path, error);
    if (!error) {
      TraceSummary summary;
      summary.ops = (*totals)->ops;
      summary.records = (*totals)->records;
      summary.bytes = bytes;
      summary.complete = true;
      return summary;
    }
  }
  // A trace that was not closed (or written before traces kept totals): count its records.
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  TraceSummary summary;
  format::Record record;
  while ((*reader)->Next(&record)) {
    ++summary.records;
    if (std::holds_alternative<format::OpRecord>(record)) ++summary.ops;
  }
  summary.bytes = (*reader)->file_bytes();
  summary.complete = (*reader)->complete();
  return summary;
}

}  // namespace ndt::tools

namespace ndt::tools {

replay::RunProgram MakeRunProgram(const std::string& context,
                                  const std::vector<std::string>& command,
                                  const std::string& directory, const std::string& prefix,
                                  const std::string& process, const std::string& like) {
  return [=](const replay::BisectRun& run) -> StatusOr<std::string> {
    for (const char* name : {"NDTRACE_DIGEST_EVERY", "NDTRACE_DIGEST_SYNC", "NDTRACE_DIGEST_WINDOW",
                             "NDTRACE_DIGEST_EXIT", "NDTRACE_CAPTURE"}) {
      unsetenv(name);
    }
    if (!run.capture.empty()) setenv("NDTRACE_CAPTURE", run.capture.c_str(), 1);
    DigestOptions digests;
    digests.every = run.digest_every;
    digests.window = run.digest_window;
    if (!ApplyDigestOptions(context, digests)) {
      return Status::Error(context + ": invalid digest window " + run.digest_window);
    }
    const std::filesystem::path base(directory);
    const std::string trace = (base / fmt::format("{}-{}.ndt", prefix, run.index)).string();
    const std::string log = (base / fmt::format("{}-{}.log", prefix, run.index)).string();
    replay::RemoveProcessTraces(trace);
    std::error_code error;
    StatusOr<TracedRun> traced = RunTraced(context, command, trace, log);
    if (!traced.ok()) return traced.status();
    if (!process.empty()) {
      StatusOr<std::vector<replay::ProcessTrace>> traces = replay::FindProcessTraces(trace);
      if (traces.ok()) {
        if (!like.empty()) {
          if (const replay::ProcessTrace* found = replay::FindLikeProcess(*traces, process, like)) {
            return found->path;
          }
        }
        for (const replay::ProcessTrace& one : *traces) {
          if (one.key == process) return one.path;
        }
      }
      return Status::Error(
          fmt::format("{}: run {} has no trace of {} (exit status {}; output in {})", context,
                      run.index, process, traced->exit_code, log));
    }
    if (!std::filesystem::exists(trace, error)) {
      // The GPU work may all be in processes it started (a multiprocessing pool): their traces
      // are companions, and the search follows the ops of one process.
      if (StatusOr<std::vector<replay::ProcessTrace>> others = replay::FindProcessTraces(trace);
          others.ok() && !others->empty()) {
        std::vector<std::string> keys;
        for (const replay::ProcessTrace& other : *others) keys.push_back(other.key);
        return Status::Error(fmt::format(
            "{}: run {} made its GPU calls in {} other process(es) it started ({}), none in the "
            "process it ran: {} follows the ops of one process, the program's own unless "
            "`--process KEY` names another (`ndtrace check` compares every process and names "
            "the one that diverged first)",
            context, run.index, others->size(), fmt::join(keys, ", "), context));
      }
      return Status::Error(fmt::format("{}: run {} left no trace (exit status {}; output in {})",
                                       context, run.index, traced->exit_code, log));
    }
    return trace;
  };
}

std::string PythonStackWords(const format::PythonStackRecord& stack) {
  using S = format::PythonStackStatus;
  if (stack.status == S::kCaptured) {
    if (const format::PythonFrame* frame = format::UserPythonFrame(stack)) {
      format::PythonFrame shown = *frame;
      shown.file = std::filesystem::path(frame->file).filename().string();
      return "at " + format::PythonFrameText(shown);
    }
  }
  switch (stack.status) {
    case S::kNativeThread:
      return "no Python stack: issued by a native thread";
    case S::kNoFrames:
      return "no Python stack: issued by a thread running no Python code";
    case S::kGilUnavailable:
      return "no Python stack: the GIL stayed busy";
    case S::kNotRunning:
      return "no Python stack: CPython was not running";
    case S::kUnsupported:
      return "no Python stack: CPython older than 3.9";
    default:
      return "no Python stack";
  }
}

void TakePythonStacks(const std::string& context, const std::vector<std::string>& command,
                      const std::filesystem::path& directory, const std::string& key,
                      const std::string& trace_a, replay::DiffReport* report) {
  if (!report->first_divergence) return;
  replay::Divergence& d = *report->first_divergence;
  if (d.klass == replay::DivergenceClass::kUncovered || d.python_stack) return;
  {
    StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(trace_a);
    if (!reader.ok() || (*reader)->header().python.empty()) return;
  }
  std::vector<replay::OpLocation> wanted{d.op};
  if (d.root) wanted.push_back(*d.root);
  // Each op by its top-level place where it has one (made inside no other op): that place still
  // holds it when the kernels earlier library calls launch inside differ in that run, where
  // its place in the lane would hold another op, perhaps another call of the same name.
  StatusOr<std::vector<std::optional<uint64_t>>> found = replay::TopLevelIndices(trace_a, wanted);
  const std::vector<std::optional<uint64_t>> top_indices =
      found.ok() ? *found : std::vector<std::optional<uint64_t>>(wanted.size());
  std::string places;
  for (size_t i = 0; i < wanted.size(); ++i) {
    places += (places.empty() ? "" : ",") +
              (top_indices[i] ? replay::PythonStackTopPlace(wanted[i], *top_indices[i])
                              : replay::PythonStackPlace(wanted[i]));
  }
  const std::string trace = (directory / "python-stack.ndt").string();
  const std::string log = (directory / "python-stack.log").string();
  fmt::print(stderr, "ndtrace {}: one more run to take the Python stack of op {}{}\n", context,
             d.op.sequence, d.root ? fmt::format(" and op {}", d.root->sequence) : "");
  replay::RemoveProcessTraces(trace);
  unsetenv("NDTRACE_CAPTURE");
  setenv("NDTRACE_PYTHON_STACK", places.c_str(), 1);
  StatusOr<TracedRun> run = RunTraced(context, command, trace, log);
  unsetenv("NDTRACE_PYTHON_STACK");
  const auto note = [&](const std::string& why) {
    report->notes.push_back("no Python stack: the run that was to take it " + why);
  };
  if (!run.ok()) return note("did not start: " + run.status().message());
  StatusOr<std::vector<replay::ProcessTrace>> processes = replay::FindProcessTraces(trace);
  if (!processes.ok()) return note(fmt::format("left no trace (exit status {})", run->exit_code));
  const replay::ProcessTrace* process = replay::FindLikeProcess(*processes, key, trace_a);
  if (process == nullptr) return note("had no process " + key);
  for (size_t i = 0; i < wanted.size(); ++i) {
    StatusOr<std::optional<format::PythonStackRecord>> stack =
        replay::FindPythonStack(process->path, wanted[i], top_indices[i]);
    if (!stack.ok()) return note("went another way: " + stack.status().message());
    if (!*stack) return note(fmt::format("did not reach op {}'s place", wanted[i].sequence));
    (i == 0 ? d.python_stack : d.root_python_stack) = std::move(**stack);
  }
  d.python_stack_trace = process->path;
}

int ReportRunDamage(const replay::RunDiff& diff, bool allow_damage) {
  int code = kExitOk;
  for (const auto& [process, single] : diff.processes) {
    for (const auto& [path, incomplete] :
         {std::pair(single.path_a, single.incomplete_a), {single.path_b, single.incomplete_b}}) {
      if (incomplete) {
        PrintWarning(fmt::format("{} is incomplete: {}", path, IncompleteText(*incomplete)));
      }
    }
    code = std::max(code, ReportDamage(single.path_a, single.damage_a, allow_damage));
    code = std::max(code, ReportDamage(single.path_b, single.damage_b, allow_damage));
  }
  return code;
}

}  // namespace ndt::tools
