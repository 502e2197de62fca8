// The fix hints of cuDNN's RNN API and its dropout descriptor (tracer/hooks_cudnn_rnn.cc records
// them as `other` ops named after the call): FindFixHint (fix_hints.h) asks here first.
#pragma once

#include <optional>

#include "formats/records.h"
#include "replayer/fix_hints.h"

namespace ndt::replay {

// The hint for a cuDNN RNN op (cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8, cudnnSetRNNDescriptor_v8, cudnnGetRNNTempSpaceSizes) or a cuDNN
// dropout op (cudnnSetDropoutDescriptor, cudnnRestoreDropoutDescriptor) diverging as `klass`;
// nullopt for any other op.
std::optional<FixHint> CudnnRnnFixHint(const format::OpRecord& op, DivergenceClass klass);

}  // namespace ndt::replay
