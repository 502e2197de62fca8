// Bisect: narrows a long, nondeterministic run down to the one op that makes it diverge, by
// recording the program again and again with digests placed ever closer around the first
// difference (`ndtrace bisect -- CMD...`). The algorithm lives here; running the program under
// the tracer is the caller's (tools/), through a callback, so replayer/ never links the tracer.
//
//   1. One run with no digest but the exit state digest: the op count N.
//   2. Runs with a state digest every ceil(W / 16) ops (W = N at first), compared pairwise
//      (DiffTraces): the first differing state digest gives the window [A, B] of ops between it
//      and the last equal one (class `uncovered`).
//   3. While the window is wider than `max_window` ops: step 2 on it (state digests every
//      ceil(W / 16) ops, so each pair of runs divides the window by about 16).
//   4. Runs with per-op digests in the window (--digest-window A:B): the diff names the op whose
//      inputs are equal and outputs differ (nondeterministic_op), or the root of a propagated
//      divergence, with its evidence and fix hint.
// A step whose runs all agree (a nondeterministic op need not differ every time) records one
// more run and compares it with the step's first, up to `runs_per_step` runs. A step that ends
// on an op-level divergence (the op carried digests of its own, as library ops do) ends the
// bisection early.
//
//   5. Confirmation of a nondeterministic op that standalone replay can re-execute
//      (CheckReplayable): one more run records it with `--capture <op>`, and the op is replayed
//      alone `confirm_runs` times (ReplayOp): it is confirmed when its outputs vary on their own,
//      "not reproduced alone" when they do not (it races with other work, e.g. another stream).
//
// Window replay (window_replay.h), on unless `window_replays` is 0: once runs were seen to
// differ in a window (step 2 or 3) narrow enough for step 4, one run records it with its ops
// captured (`--capture A-B`, as `record --window A:B` does) and the window is replayed from that
// trace alone, up to `window_replays` times (`window_repeat` runs of each op): the first op whose
// outputs vary is named `nondeterministic_op`, confirmed by the replay itself (no step 5). When the
// window cannot be replayed (an op window replay does not re-execute) or replays identical (the op
// varies only with the program around it: another stream's timing), step 4 runs as above.
// Then: 1 + 2 per state-digest step + 1 capture run, and the window replays.
//
// Program runs: 1 + 2 per step when every pair differs: 1 + 2 * (1 + ceil(log16(N / max_window))
// + 1), which for N <= 16 * max_window is 5; and 1 for the confirmation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "replayer/trace_diff.h"

namespace ndt::replay {

// What one program run is recorded with.
struct BisectRun {
  int index = 0;               // 1, 2, ... in the order of the runs
  uint64_t digest_every = 0;   // state digest every N ops (0: none)
  std::string digest_window;   // "A:B": per-op digests of ops A..B (empty: none)
  std::string capture;         // NDTRACE_CAPTURE: ops stored for standalone replay (empty: none)
};

// Runs the program once under the tracer as `run` says; returns the path of its trace.
using RunProgram = std::function<StatusOr<std::string>(const BisectRun& run)>;

struct BisectOptions {
  int runs_per_step = 4;      // runs one step may record before it gives up seeing a difference
  int max_runs = 40;          // program runs in all
  uint64_t max_window = 4096;  // widest window digested op by op
  uint64_t digests_per_window = 16;
  int confirm_runs = 10;  // standalone replays of the op found (0: no confirmation run)
  int window_replays = 2;  // window replays of the op-level window (0: per-op digest runs)
  int window_repeat = 5;   // runs of each op in one window replay
};

struct BisectResult {
  uint64_t ops = 0;  // N: ops of the first run
  int runs = 0;      // program runs made
  int window_replays = 0;  // window replays made (each `window_repeat` runs of every op)
  // The last diff that found a divergence; nullopt when every run agreed.
  std::optional<DiffReport> report;
  // True when the report names one op (not an `uncovered` window).
  bool found_op = false;
  std::vector<std::string> steps;  // one line per step, for the user
  std::string stopped_because;     // non-empty when it ended before naming one op
  // When an op was found: "confirmed: ...", "not reproduced alone: ..." or "not confirmed: <why>"
  // (step 5); empty when confirmation was off.
  std::string confirmation;
};

// What `ndtrace check` does once two runs differ but the report names no op (`propagated`:
// the data reached an op already different, with a suspect that wrote it; `uncovered`: device
// memory differed at a state digest), so that it ends on the op itself:
//   1. A suspect that is a kernel launch is recorded again with its launches captured
//      (`kernel:<its name>`), the launch at the suspect's place in its lane (thread, stream,
//      position: the same in every run) is replayed alone `confirm_runs` times; when its
//      outputs vary, it is the nondeterministic op (placement-proof: one run's inputs). When
//      they do not, its inputs already differed: the launches of run A that last wrote what it
//      reads (its pointers to const; every pointer when the name says nothing) are tried the
//      same way, newest first, walking back along the data.
//   2. Otherwise runs with per-op digests in the report's window (as bisect step 4), then 1 for
//      a suspect that step names.
// At most `max_runs` program runs. The result's report is the narrowed one (its first
// divergence names the op), or the one given when nothing narrowed it; `steps` say what was
// tried, in words.
struct NarrowResult {
  DiffReport report;
  bool named = false;  // the report's first divergence names one op (NamesTheOp)
  int runs = 0;
  std::vector<std::string> steps;
};
StatusOr<NarrowResult> Narrow(const BisectOptions& options, const DiffReport& report,
                              const RunProgram& run_program,
                              const std::function<void(const std::string&)>& progress);

// Whether a divergence names the op that caused it: not propagated (unless from the host) or
// uncovered.
bool NamesTheOp(const Divergence& divergence);

// ceil(log2 n), 0 for n <= 1.
int CeilLog2(uint64_t n);

// Bisects. `progress` gets one line per run and step as they happen. Fails when a run fails
// or its trace cannot be read.
StatusOr<BisectResult> Bisect(const BisectOptions& options, const RunProgram& run_program,
                              const std::function<void(const std::string&)>& progress);

}  // namespace ndt::replay
