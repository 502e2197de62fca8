// Running a program under the tracer: what `ndtrace record` and `ndtrace check` share.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"
#include "replayer/bisect.h"
#include "replayer/run_set.h"
#include "replayer/trace_diff.h"

namespace CLI {
class App;
}

namespace ndt::tools {

// Which digests of device memory the tracer takes (tracer/README.md): the options of `record`
// and `check`, passed on as the NDTRACE_DIGEST_* environment variables.
struct DigestOptions {
  uint64_t every = 0;    // --digest-every N: a state digest every N ops (0: off)
  bool sync = false;     // --digest-sync: a state digest at every host synchronisation
  std::string window;    // --digest-window A:B or A:: per-op digests of ops A..B
  bool no_exit = false;  // --no-exit-digest
  bool no_gpu_time = false;  // --no-gpu-time: no GPU times from CUPTI (NDTRACE_GPU_TIME=0)
};

// Adds the four digest options and --no-gpu-time to `app`.
void AddDigestOptions(CLI::App* app, DigestOptions* options);

// Validates `options` and sets the NDTRACE_DIGEST_* variables the traced program inherits
// (only those the options ask for). False, after printing an `error:` line, when invalid.
bool ApplyDigestOptions(const std::string& context, const DigestOptions& options);

// The policy the tracer applies to library choices (tracer/policy.h): the options of `record`,
// `check` and `run`, passed on as NDTRACE_POLICY / NDTRACE_PIN.
struct PolicyOptions {
  bool deterministic = false;  // --deterministic
  std::string pin;             // --pin TRACE
};

// Adds --deterministic and --pin TRACE (mutually exclusive) to `app`.
void AddPolicyOptions(CLI::App* app, PolicyOptions* options);

// Checks that the --pin trace is readable and sets the variables the traced program inherits.
// False, after printing an `error:` line, when it is not.
bool ApplyPolicyOptions(const std::string& context, const PolicyOptions& options);

// The Python startup shim (tools/python/sitecustomize.py): the option of `record`, `check`
// and `run` that turns it off.
struct PythonOptions {
  bool no_python = false;       // --no-python
  bool tensor_digests = false;  // --tensor-digests
};

// Adds --no-python and --tensor-digests to `app`.
void AddPythonOptions(CLI::App* app, PythonOptions* options);

// With --no-python, sets NDTRACE_PYTHON=0, which RunTraced and the shim obey; with
// --tensor-digests, NDTRACE_TENSOR_DIGESTS=1, which the shim obeys.
void ApplyPythonOptions(const PythonOptions& options);

// The directory holding the Python shim: `python/` beside this executable (the build tree and
// a bundle have it there), else the source tree's tools/python; empty when neither exists.
std::string PythonShimDirectory();

// Whether our own command line has a `--` after the word `subcommand` (CLI11 accepts a
// command without it, but an option of CMD would then be taken for one of ours).
bool HasSeparator(std::string_view subcommand);

// libndtrace.so beside this executable (an installed or bundled layout), else the one this
// binary was built with; empty when neither exists.
std::string TracerLibrary();

struct TracedRun {
  int pid = 0;
  int exit_code = 0;  // the program's status, 128 + signal if a signal killed it
};

// Called every `every` while the program runs, with how long it has run so far.
struct RunProgress {
  std::chrono::seconds every{0};  // 0: never
  std::function<void(std::chrono::seconds running)> report;
};

// Runs `command` with the tracer preloaded (prepended to LD_PRELOAD) writing its trace to
// `trace_path` (made absolute; empty: the tracer's default). stdout and stderr go to
// `log_path` when it is not empty. Waits for the program, reporting `progress`. Fails when
// the tracer library is missing or the program cannot be started; the message starts with
// `context`.
StatusOr<TracedRun> RunTraced(const std::string& context, const std::vector<std::string>& command,
                              const std::string& trace_path, const std::string& log_path = "",
                              const RunProgress& progress = {});

// The RunProgram of replay::Bisect and replay::Narrow: each run of `command` records
// `directory`/`prefix`-<index>.ndt (its output in .log beside it) with the digests and capture
// the run asks for (the policy variables already set are inherited). `context` starts messages.
// `process`: the key of the process whose trace the search follows in a run of several
// (replay::ProcessTrace, "rank 1"); empty: the process the command started. An unranked one
// ("process 2", numbered by start order) is found by what it did like the trace at `like`
// (replay::FindLikeProcess), when given.
replay::RunProgram MakeRunProgram(const std::string& context,
                                  const std::vector<std::string>& command,
                                  const std::string& directory, const std::string& prefix,
                                  const std::string& process = "", const std::string& like = "");

// How many ops the trace at `path` holds so far, from its chunk headers alone (cheap on a trace
// still being written); nullopt while there is no readable trace there.
std::optional<uint64_t> OpsSoFar(const std::string& path);

// Prints what the comparison of two runs met in their traces, on stderr as show and stats do
// (cli_support.h): a warning per incomplete trace, and per damaged range an `error:` line, or
// a `warning:` line with `allow_damage`.
// Returns kExitUsage when there was damage and it is not allowed, else kExitOk.
int ReportRunDamage(const replay::RunDiff& diff, bool allow_damage);

struct TraceSummary {
  uint64_t ops = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  bool complete = false;
  uint64_t processes = 1;
};

// Counts the ops and records of the trace at `path`.
StatusOr<TraceSummary> SummarizeTrace(const std::string& path);

// When the process whose report `report` is had CPython in it (its run A's header, `trace_a`)
// and the report names an op, runs `command` once more (`directory`/python-stack.ndt, output in
// python-stack.log) asking the tracer for the Python stacks of that op and of its root
// (tracer/README.md "Python stacks"), and puts them on the report; `key` names the process
// among the run's (replay::ProcessTrace). What goes wrong is a note on the report: no verdict
// depends on it. `context` starts the progress line ("check", "bisect").
void TakePythonStacks(const std::string& context, const std::vector<std::string>& command,
                      const std::filesystem::path& directory, const std::string& key,
                      const std::string& trace_a, replay::DiffReport* report);

// The Python location for a verdict line: "at train.py:42 in forward" (the file's base name),
// or why there is none in a few words ("no Python stack: issued by a native thread").
std::string PythonStackWords(const format::PythonStackRecord& stack);

}  // namespace ndt::tools
