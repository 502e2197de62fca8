// The HTML page of a diff (`ndtrace diff --html`, `ndtrace check --html`): one self-contained
// file — no network, no external script or font — that shows the verdict, the first divergent
// op as a card, a zoomable strip of both runs' ops lane by lane coloured by what the diff
// decided, how the divergence grows after the first op, the element-wise differences of a
// captured output, and what a policy replaced. The page's code is report_page/page.html; the
// data is the ndtrace.diff JSON document plus the timeline below, embedded as JSON.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "replayer/determinism_cost.h"
#include "replayer/run_set.h"
#include "replayer/trace_diff.h"

namespace ndt::replay {

// What DiffTraces decided about each op pair (a DiffObserver), kept for the strip. Bounded:
// the first `max_ops` outcomes are kept, then only those that are not identical (up to a
// quarter as many again); the rest are counted.
class DiffTimeline : public DiffObserver {
 public:
  struct Entry {
    int64_t sequence_a = -1;  // -1: only in run B
    int64_t sequence_b = -1;  // -1: only in run A, or not an op pair (uncovered)
    uint64_t lane_index = 0;  // position in its lane, in run A (run B's when only there)
    uint32_t row = 0;         // index into lanes()
    uint32_t name = 0;        // index into names()
    PairOutcome::Kind kind = PairOutcome::Kind::kIdentical;
    DivergenceClass klass = DivergenceClass::kNondeterministicOp;
    bool sized = false;
    double sum_a = 0, sum_b = 0, max_abs_a = 0, max_abs_b = 0;  // when sized
  };
  struct Lane {
    uint32_t thread_id = 0;
    uint32_t stream_id = 0;
  };

  explicit DiffTimeline(size_t max_ops = 100000) : max_ops_(max_ops) {}
  void Pair(const PairOutcome& outcome) override;

  const std::vector<Entry>& entries() const { return entries_; }
  const std::vector<Lane>& lanes() const { return lanes_; }
  const std::vector<std::string>& names() const { return names_; }
  uint64_t omitted() const { return omitted_; }  // outcomes not kept

 private:
  size_t max_ops_;
  std::vector<Entry> entries_;
  std::vector<Lane> lanes_;
  std::map<uint64_t, uint32_t> rows_;  // lane key -> row
  std::vector<std::string> names_;
  std::map<std::string, uint32_t, std::less<>> name_ids_;
  uint64_t omitted_ = 0;
};

struct PageText {
  std::string title;    // the page's title, e.g. "ndtrace check: python train.py"
  std::string verdict;  // the one-line verdict, as the command printed it
  std::vector<std::string> notes;  // shown under the verdict (other processes, narrowing)
  std::optional<DeterminismCost> cost;  // check --deterministic / --pin: what the policy costs
};

// The page for `report`, with the strip from `timeline` and the policy decisions of run A
// (read from report.path_a; a trace that cannot be read adds a note instead).
std::string RenderDiffHtml(const DiffReport& report, const DiffTimeline& timeline,
                           const PageText& text);

// Compares the report's two traces again with a timeline attached (`options` as the report
// was made with), and renders the page. Fails only when a trace cannot be opened.
StatusOr<std::string> DiffPage(const DiffReport& report, const PageText& text,
                               DiffOptions options = {});

// The page of a run diff: that of its first process that is not identical (the first process
// when all are), the others named in its notes.
StatusOr<std::string> RunDiffPage(const RunDiff& diff, PageText text);

}  // namespace ndt::replay
