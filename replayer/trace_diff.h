// TraceDiff: compares two traces of the same program and names the first op where they
// stop being bitwise identical, and why.
//
// Both traces are read as streams. Ops are aligned per lane — (thread id, stream id) — by
// their position in the lane, so op k of a lane in run A meets op k of the same lane in run
// B whatever the interleaving between threads. An op present in one run only, or a
// different kernel at the same place, is a structural difference: it is reported once
// (the first) and alignment resynchronises by looking ahead a bounded window. Memory is
// bounded by that window and by how far the two files' chunk interleavings drift apart,
// never by the traces' length.
//
// Classification of an aligned pair whose outputs (or consumed state) differ:
//   algorithm selection  the library chose a different algorithm/engine
//   RNG state            seed/offset/ordering of the random state consumed differ
//   propagated           the op's inputs already differ (root: host data, or an earlier op);
//                        a kernel's captured whole allocation counts only where its bytes
//                        differ inside the op's tensors (capture_placement.h)
//   nondeterministic op  inputs equal (or none), outputs differ
//   uncovered            a state digest differs with no op-level divergence before it
// The first divergence is the one with the smallest op sequence in run A.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/nvtx_paths.h"
#include "formats/records.h"
#include "formats/status.h"
#include "formats/trace_reader.h"
#include "replayer/fix_hints.h"
#include "replayer/op_compare.h"

namespace ndt::replay {

// Where an op is, in the words a user recognises.
struct OpLocation {
  uint64_t sequence = 0;
  uint32_t thread_id = 0;
  uint32_t stream_id = 0;
  uint64_t lane_index = 0;  // position in its lane (thread, stream)
  format::OpKind kind = format::OpKind::kOther;
  std::string name;
  uint64_t lane = 0;  // the lane's key in its run (LaneKeys: thread, the thread's stream ordinal)
};

// A difference between the two headers. `blocking` ones make bitwise equality impossible
// or very unlikely (another GPU model, SM count, compute capability); the others are
// warnings (library versions, determinism-relevant environment, policy).
struct HeaderDifference {
  std::string field;
  std::string a;
  std::string b;
  bool blocking = false;
};

// The first op present in one run only or of a different kind/name at the same place.
struct StructuralDifference {
  std::optional<OpLocation> a;  // absent: the op exists only in B
  std::optional<OpLocation> b;  // absent: the op exists only in A
  std::string what;
};

// Size of a numeric divergence, from the outputs' numeric summaries.
struct DivergenceSize {
  std::string role;
  format::DType dtype = format::DType::kUnknown;
  double sum_a = 0, sum_b = 0;
  double max_abs_a = 0, max_abs_b = 0;
};

struct Divergence {
  DivergenceClass klass = DivergenceClass::kNondeterministicOp;
  OpLocation op;                   // in run A (run B's op is at the same lane position)
  uint64_t sequence_b = 0;         // the aligned op's sequence in run B
  std::string what;                // one sentence: what differs
  std::vector<std::string> evidence;
  std::optional<OpLocation> root;            // kPropagated: the op that last wrote the input
  // kPropagated: the input is host data a copy brought to the GPU (no op wrote its source):
  // the runs diverged on the CPU, and the copy is the op to name.
  bool from_host = false;
  // kPropagated: the op is an NCCL call whose result holds other ranks' data, its own inputs
  // did not differ but another rank's did: "another rank" when the diff of one trace cannot
  // tell which (a call that only moves data, such as ncclRecv, whose sender is elsewhere); the
  // key of that process ("rank 1") when the runs' other processes tell (replayer/run_set.h).
  std::string from_process;
  std::optional<uint64_t> window_begin;      // kUncovered / kPropagated: ops to bisect
  std::optional<uint64_t> window_end;
  std::optional<DivergenceSize> size;
  std::optional<ExactDifference> exact;  // both runs captured the op (record --capture)
  std::optional<FixHint> hint;  // for `op`, or for `root` when the root is a kernel
  // The Python stack that issued `op` / `root`, when a trace holds it (PythonStackRecord: run
  // A's own, or a run made to take it, python_stacks.h); `python_stack_trace` names that trace.
  std::optional<format::PythonStackRecord> python_stack;
  std::optional<format::PythonStackRecord> root_python_stack;
  std::string python_stack_trace;
  // The NVTX ranges that enclosed `op` in run A (formats/nvtx_paths.h): the range path, and the
  // PyTorch op and module when ndtrace's Python shim or emit_nvtx named them. Absent when no
  // range enclosed it.
  std::optional<format::RangeContext> ranges;
};

struct DiffReport {
  std::string path_a;
  std::string path_b;
  std::vector<HeaderDifference> header;
  std::optional<StructuralDifference> first_structural;
  uint64_t structural_differences = 0;
  // Of them, ops in one run only after the other run's last op in their lane: where a run
  // stopped earlier (killed, failed, or ended while a thread was still issuing work).
  uint64_t lane_tail_ops = 0;
  std::optional<Divergence> first_divergence;
  uint64_t divergent_ops = 0;      // aligned pairs that differ in any compared fact
  uint64_t ops_a = 0;
  uint64_t ops_b = 0;
  uint64_t ops_compared = 0;       // aligned pairs
  std::vector<std::string> warnings;  // dropped records
  // The byte ranges of each trace its reader found damaged. Not part of the report: the
  // commands print them on stderr and exit 2 unless told to compare what is intact
  // (tools/README.md, "Damaged traces").
  std::vector<format::TraceDamage> damage_a;
  std::vector<format::TraceDamage> damage_b;
  // Set when a trace was never closed (its writer was killed): the bytes at its end that form
  // no whole chunk. Printed on stderr with the damage, not part of the report either.
  std::optional<uint64_t> incomplete_a;
  std::optional<uint64_t> incomplete_b;
  std::vector<std::string> notes;     // differences that are not divergences, and why
  // Header fields that say the runs are of another program, command line or input file
  // (they are in `header` too, as warnings); `refused`: for that, the ops were not compared.
  std::vector<std::string> other_program;
  bool refused = false;
  // The ops differed lane by lane, but the two runs made the same ops on the same data, in
  // another order or on other threads (op_multiset.h): the divergences and structural
  // differences were cleared, and a note says so.
  bool reordered = false;

  bool comparable() const;  // no blocking header difference
  bool identical() const;   // comparable, not refused, no divergence, no structural difference
  // Comparable, not refused, no divergence, and every structural difference a lane's tail.
  bool differs_only_at_lane_tails() const;
  bool damaged() const { return !damage_a.empty() || !damage_b.empty(); }
};

// What the diff decided about one aligned pair of ops or one op present in one run only, told
// as it decides: lane by lane as the records arrive, not in op order. For pictures of the whole
// comparison (replayer/diff_html.h); a report needs none of it.
struct PairOutcome {
  enum class Kind : uint8_t { kIdentical, kDiverged, kStructural };
  Kind kind = Kind::kIdentical;
  const OpLocation* a = nullptr;  // null: the op is only in run B
  const OpLocation* b = nullptr;  // null: only in run A (or an uncovered divergence)
  DivergenceClass klass = DivergenceClass::kNondeterministicOp;  // kDiverged
  const DivergenceSize* size = nullptr;  // kDiverged, when numeric summaries were recorded
};

class DiffObserver {
 public:
  virtual ~DiffObserver() = default;
  virtual void Pair(const PairOutcome& outcome) = 0;
};

struct DiffOptions {
  size_t resync_window = 64;  // ops looked ahead per lane to resynchronise after a mismatch
  // Compare op by op even when the runs are of another program, command line or input file
  // (DiffReport::other_program). `ndtrace diff` sets it from --force; the commands that run the
  // same command themselves (check, bisect, replay) leave it on.
  bool force = true;
  DiffObserver* observer = nullptr;  // told every pair's outcome; not owned
};

// "PATH: what (bytes B..E)" for the first damaged range of either trace, and how many more.
std::string DamageText(const DiffReport& report);

// Makes `report` identical: its ops were the same as the other run's, on the same data, in
// another order or on other threads or processes (op_multiset.h); `why` says so as a note.
void MarkReordered(DiffReport* report, std::string why);

// Compares the traces at `path_a` and `path_b`, each read to its end. Fails only when a trace
// cannot be opened; damage inside a trace is listed in damage_a / damage_b, and the rest of
// it compared.
StatusOr<DiffReport> DiffTraces(const std::string& path_a, const std::string& path_b,
                                const DiffOptions& options = {});

// The NVTX ranges that enclosed op `sequence` of the trace at `path` (read from its start up
// to that op); nullopt when none did, or the trace or op cannot be read.
std::optional<format::RangeContext> FindOpRanges(const std::string& path, uint64_t sequence);

}  // namespace ndt::replay
