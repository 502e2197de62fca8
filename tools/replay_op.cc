#include "tools/replay_op.h"

#include <fmt/format.h>

namespace ndt::tools {

int RunReplayOp(const ReplayOpOptions& options) {
  fmt::print(stderr, "error: replay --op {}: not implemented yet\n", options.op);
  return 2;
}

}  // namespace ndt::tools
