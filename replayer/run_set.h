// A run of a program may be several processes, each writing its own trace: under
// `ndtrace record -o PATH` the process the launcher started writes PATH, every other process
// of the run `PATH.rank<R>` (when RANK, LOCAL_RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK gives
// it a rank) or `PATH.<pid>`, and a forked child `<its parent's path>.<pid>`
// (tracer/README.md). A run is compared with another process by process, rank by rank.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "replayer/trace_diff.h"

namespace ndt::replay {

// One process's trace and the key it is paired by: "rank R" (its header's rank), "main" (the
// trace at the run's own path), or "process N" (the other unranked ones, N = 1, 2, ... by
// start time).
struct ProcessTrace {
  std::string key;
  std::string path;
};

// The traces of the run at `path`: the file itself (when it exists) and its companions in the
// same directory; or, for a directory, every trace file in it (unranked ones then numbered
// "process N" too). Ordered: "main", then ranks ascending, then "process N". Fails when there
// is none or a trace cannot be opened.
StatusOr<std::vector<ProcessTrace>> FindProcessTraces(const std::string& path);

// The process of `run` that stands for the one keyed `key` whose trace is `like` (of another run
// of the same command): by key, or for an unranked process ("process N"), the one that did the
// same (PairUnranked's rules: the same ops and copied data, then the same ops) before the same
// key. Null when none.
const ProcessTrace* FindLikeProcess(const std::vector<ProcessTrace>& run, const std::string& key,
                                    const std::string& like);

// Removes the trace at `path` and its companions (the traces FindProcessTraces would take with
// it), before a run writes there again: a companion left from an earlier run would be taken
// for a process of the new one.
void RemoveProcessTraces(const std::string& path);

// The comparison of two runs, process by process.
struct RunDiff {
  std::vector<std::pair<std::string, DiffReport>> processes;  // (key, report), paired by key
  std::vector<std::string> only_in_a;  // keys of processes run B lacks
  std::vector<std::string> only_in_b;
  bool single() const {  // one process on each side: report as a plain diff
    return processes.size() == 1 && only_in_a.empty() && only_in_b.empty();
  }
  bool identical() const;
  // Not identical, the same processes, and every difference a lane's tail in one run only
  // (DiffReport::differs_only_at_lane_tails): where a run stopped earlier.
  bool differs_only_at_lane_tails() const;
  uint64_t lane_tail_ops() const;  // over every process
  // The first pair that is not identical and whose first divergence is its own (not a
  // collective another process's data made differ: Divergence::from_process), else the first
  // pair that is not identical; null when all are.
  const std::pair<std::string, DiffReport>* first_diverged() const;
};

// Compares the runs process by process. Then a process whose first divergence is a collective
// (NCCL) that gave different results from identical inputs is told apart from a collective that
// is itself nondeterministic: when another process's matching collective (the same
// communicator, the same count of collectives on it before) received data that already
// differed, or that process diverged before it, the divergence is that process's
// (kPropagated with Divergence::from_process).
StatusOr<RunDiff> DiffRuns(const std::string& path_a, const std::string& path_b,
                           const DiffOptions& options = {});

// Text: a plain diff report for a single process; otherwise one section per process
// ("== rank 0: A vs B"), then the processes present in one run only.
std::string RenderRunDiffText(const RunDiff& diff, bool color = false);
// JSON: the ndtrace.diff/2 document for a single process; otherwise an ndtrace.diff-set/1
// document (replayer/README.md).
std::string RenderRunDiffJson(const RunDiff& diff);

}  // namespace ndt::replay
