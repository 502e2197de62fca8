// The table that turns "this kernel diverged" into "this is torch.Tensor.index_add_, it
// adds floats with atomics, and this is what fixes it". Kernel rows match demangled launch
// names of the PyTorch CUDA kernels of the ops listed by torch.use_deterministic_algorithms
// and of their deterministic siblings; library ops are matched by kind. The table is data:
// fix_hints.cc, which says where each row comes from.
#pragma once

#include <optional>
#include <string>
#include <string_view>

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

// The hint for `op` diverging as `klass`, or nullopt when the table has none. A kernel the
// table knows as deterministic gets a hint whose framework_op ends in "(a deterministic
// kernel, not a suspect)" and that points before it; a kernel not in the table gets a generic
// hint when it diverged itself (kNondeterministicOp).
// `framework_op`, when known (the PyTorch op whose NVTX range enclosed `op`, e.g.
// "aten::index_add_"), is looked up first: an op name is more reliable than kernel-name
// patterns.
std::optional<FixHint> FindFixHint(const format::OpRecord& op, DivergenceClass klass,
                                   std::string_view framework_op = {});

// The hint for data that differed on the host before the GPU saw it: copied to the GPU, or
// (`managed`) written by the host into managed memory (cudaMallocManaged) a kernel then read.
FixHint HostDataHint(bool managed);

// The hint for a PyTorch op's host tensor that differed before any recorded op wrote it: data
// the program made in Python (torch.tensor of Python or NumPy values, a file, a DataLoader
// worker) that already differed.
FixHint PythonDataHint();

// The hint for an op that read, on one stream, what another stream wrote with nothing ordering
// the two (replayer/stream_order.h).
FixHint StreamRaceHint();

// Whether the aten op ("aten::randperm") draws random numbers: identical inputs and different
// outputs then mean its generator's state differed (rng_state), not that it is nondeterministic.
bool IsRandomAtenOp(std::string_view name);

// The hint for a PyTorch op by its aten name ("aten::scatter_add_"), or nullopt when the op
// is not one torch.use_deterministic_algorithms lists.
std::optional<FixHint> FindFrameworkOpHint(std::string_view framework_op);
// Number of aten op names the table knows; tests check each is reached.
size_t FrameworkOpHintCount();

// Number of distinct kernel hints (suspect ops) in the table; tests check each is reached.
size_t KernelHintCount();

}  // namespace ndt::replay
