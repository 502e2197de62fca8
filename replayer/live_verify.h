// Live verify: follows the trace a re-run of a program is writing and compares it with a
// reference trace as its chunks land, so that the first divergent op is known while the
// program still runs (`ndtrace replay TRACE -- CMD...`). The re-run itself (the tracer in
// replay-force mode) is started and ended by tools/; nothing here links the tracer.
//
// Following: the writer seals chunks at least every 100 ms (formats/README.md). Each Poll()
// re-opens the growing file when it grew, seeks to the smallest op sequence not yet seen and
// reads on, skipping ops and state digests it has already compared, so each op is decoded a
// bounded number of times and compared once. Ops are aligned with the reference per lane
// (thread, stream) by position, state digests by order, as DiffTraces does; a pair is compared
// on kind, name, arguments (without raw addresses), algorithm choice, RNG state, status and
// the input and output digests. The moment a pair differs, Report() runs DiffTraces on the
// reference and the new trace as it is then, for the full classification, evidence and fix
// hint, and drops what only the unfinished new trace explains (ops of the reference past the
// end of the new trace's lane).
//
// Not thread-safe: one thread polls and reports.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"
#include "replayer/op_compare.h"
#include "replayer/trace_diff.h"

namespace ndt::format {
class TraceReader;
}

namespace ndt::replay {

// The digest options a trace was recorded with, as far as its records show them: state
// digests with reason `every N ops` (every = N), `synchronize` (sync) and `exit`; the ops of
// kind kernel launch or memset that carry output digests give the digest window (first:last).
struct RecordedDigests {
  uint64_t every = 0;
  bool sync = false;
  bool exit = false;
  std::string window;  // "A:B", or empty
  uint64_t ops = 0;    // ops in the trace
};

// Reads the whole trace at `path` once. Fails when it cannot be opened or is damaged.
StatusOr<RecordedDigests> FindRecordedDigests(const std::string& path);

// Whether the reference trace can be replayed with `command`: its program (the file name of
// the first word of the recorded command line) must be the same; other arguments differing
// are returned as a warning in `warning`. Fails, naming both, when the program differs.
Status CheckSameProgram(const format::TraceHeader& reference,
                        const std::vector<std::string>& command, std::string* warning);

// Follows the new trace at `new_path` against the reference at `reference_path`.
class LiveVerifier {
 public:
  // Opens the reference (fails when it cannot be read or is damaged where Open looks). The
  // new trace need not exist yet.
  static StatusOr<std::unique_ptr<LiveVerifier>> Open(const std::string& reference_path,
                                                      const std::string& new_path);
  ~LiveVerifier();
  LiveVerifier(const LiveVerifier&) = delete;
  LiveVerifier& operator=(const LiveVerifier&) = delete;

  // Reads what landed in the new trace since the last call and compares it. Returns whether a
  // divergence (a pair that differs, or a structural difference) has been seen so far. Cheap
  // when the file did not grow.
  bool Poll();

  bool diverged() const { return first_difference_.has_value(); }
  // The op sequence (in the new trace) where the follower first saw a difference.
  std::optional<uint64_t> first_difference() const { return first_difference_; }
  uint64_t ops_followed() const { return ops_followed_; }
  const std::string& new_path() const { return new_path_; }
  uint64_t polls_that_read() const { return polls_that_read_; }

  // The diff of the reference with the new trace as it is now (DiffTraces), without the
  // differences that only its being unfinished explains; `finished`: the program has ended and
  // the new trace is whole (then nothing is dropped).
  StatusOr<DiffReport> Report(bool finished) const;

 private:
  struct Lane {
    std::deque<format::OpRecord> reference;  // ops of the reference not yet compared
    std::deque<format::OpRecord> pending;    // new ops waiting for their reference op
    uint64_t new_count = 0;                  // new ops of this lane seen
  };

  LiveVerifier(std::unique_ptr<format::TraceReader> reference, std::string reference_path,
               std::string new_path);
  void TakeNewOp(format::OpRecord&& op);
  void TakeNewState(format::StateDigestRecord&& state);
  // Reads one more record of the reference; false at its end.
  bool PullReference();
  void Match(Lane& lane);
  void MatchStates();
  void Differs(uint64_t sequence);

  std::unique_ptr<format::TraceReader> reference_;
  bool reference_done_ = false;
  std::string reference_path_;
  std::string new_path_;
  uint64_t new_file_bytes_ = 0;   // size at the last read
  uint64_t consumed_end_ = 0;     // file offset up to which every chunk has been read
  uint64_t watermark_ = 0;        // smallest op sequence of the new trace not yet seen
  std::set<uint64_t> seen_above_;  // sequences > watermark_ already seen
  std::set<std::pair<uint64_t, std::string>> states_seen_;
  std::deque<format::StateDigestRecord> reference_states_;
  std::deque<format::StateDigestRecord> new_states_;
  std::map<uint64_t, Lane> lanes_;  // by LaneKeys key, the same in both runs
  LaneKeys reference_lanes_;
  LaneKeys new_lanes_;
  std::optional<uint64_t> first_difference_;
  uint64_t ops_followed_ = 0;
  uint64_t polls_that_read_ = 0;
};

}  // namespace ndt::replay
