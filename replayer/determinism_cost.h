// What determinism costs: the GPU time of the ops a policy replaced (`--deterministic` chose
// deterministic algorithms, `--pin` forced recorded ones), in a run under the policy against a
// plain run of the same program, and the GPU time of each whole run. GPU times come from CUPTI
// (tracer/README.md, "GPU time"); ops of the two runs are matched by their place in their lane
// (thread, stream: LaneKeys), as diff matches them. Both traces are streamed twice; memory
// grows with the number of replaced ops, not with the traces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"

namespace ndt::replay {

struct CostLine {
  std::string name;  // the replaced ops' name (cudnnConvolutionBackwardFilter, ...)
  uint64_t ops = 0;  // how many of them were matched in both runs
  uint64_t plain_ns = 0;   // their GPU time without the policy
  uint64_t policy_ns = 0;  // and with it
};

struct DeterminismCost {
  bool measured = false;  // both runs have GPU times
  std::string why_not;    // when not measured
  std::vector<CostLine> replaced;  // one line per op name, in order of first replacement
  uint64_t unmatched = 0;          // replaced ops with no op at their place in the plain run
  uint64_t plain_total_ns = 0;     // every kernel, copy and memset of the plain run
  uint64_t policy_total_ns = 0;    // and of the policy run
};

// Fails only when a trace cannot be opened.
StatusOr<DeterminismCost> MeasureDeterminismCost(const std::string& policy_trace,
                                                 const std::string& plain_trace);

// "+41 %", "-3 %", "±0 %"; "n/a" when `before` is 0.
std::string ChangeText(uint64_t before, uint64_t after);

// The JSON document ("ndtrace.cost/1", replayer/README.md), one line.
std::string RenderCostJson(const DeterminismCost& cost);

// The lines `check` prints: "cost of determinism (GPU time): ..." then one per op name and the
// total; or why it was not measured.
std::string RenderCostText(const DeterminismCost& cost);

}  // namespace ndt::replay
