// The table that turns "this kernel diverged" into "this is torch.Tensor.index_add_, it
// adds floats with atomics, and this is what fixes it". Kernel-name patterns come from the
// PyTorch CUDA sources of the ops listed by torch.use_deterministic_algorithms; library ops
// are matched by kind. The table is data: fix_hints.cc, one row per entry.
#pragma once

#include <optional>
#include <string>

#include "formats/records.h"

namespace ndt::replay {

// Why two aligned ops differ (see trace_diff.h for the rules).
enum class DivergenceClass {
  kNondeterministicOp,
  kRngState,
  kAlgorithmSelection,
  kPropagated,
  kUncovered,
};
// "nondeterministic_op", "rng_state", "algorithm_selection", "propagated", "uncovered".
const char* DivergenceClassName(DivergenceClass c);

struct FixHint {
  std::string framework_op;  // what the user wrote, e.g. "torch.Tensor.index_add_"
  std::string mechanism;     // why it is not reproducible
  std::string fix;           // what makes it reproducible
};

// The hint for `op` diverging as `klass`, or nullopt when the table has none. Ops whose
// kernel is not in the table get a generic hint for their class when one applies.
std::optional<FixHint> FindFixHint(const format::OpRecord& op, DivergenceClass klass);

// Number of kernel-name rows in the table (tests check the table stays complete).
size_t KernelHintCount();

}  // namespace ndt::replay
