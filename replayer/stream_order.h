// Whether a divergence's op and the op that wrote what it read ran on two streams with nothing
// ordering them: a race between streams (a copy or side stream the reading stream never waited
// for), which the diff alone reports as `propagated` with the writer as its suspect.
#pragma once

#include <optional>
#include <string>

#include "replayer/trace_diff.h"

namespace ndt::replay {

// For a propagated divergence whose root (the last writer of what the op read) is on another
// stream: reads trace A and returns why nothing in it orders the write before the read, or
// nullopt when something may (or when the question does not apply). Conservatively, any of these
// counts as ordering, and then no race is claimed:
//  - a wait on the reading stream (cuStreamWaitEvent) for an event recorded after the write, on
//    any stream, issued between the two;
//  - any host synchronisation (a synchronize op) between the two;
//  - a write that is complete when its call returns (a synchronous copy: the trace cannot tell
//    pinned from pageable host memory, whose synchronous copies return once staged);
//  - the legacy default stream's implicit ordering: either op on it while the other's stream is
//    a blocking one (not created with CU_STREAM_NON_BLOCKING in the trace), or any op on it in
//    between;
//  - an op captured into a CUDA graph (its order is the graph launch's).
std::optional<std::string> UnorderedStreams(const std::string& path_a, const Divergence& d);

}  // namespace ndt::replay
