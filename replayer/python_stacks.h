// Asking a run for the Python stack of an op a report names, and finding it in that run's trace.
//
// The tracer takes an op's Python stack only when asked (NDTRACE_PYTHON_STACK, tracer/README.md
// "Python stacks"), naming the op by its place in a lane, the identity that is the same in
// every run of a program (formats/README.md "Lanes"). `ndtrace check` asks for the divergent
// op (and its root) in one more run once it knows them; diff shows a stack a trace already has.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"
#include "replayer/trace_diff.h"

namespace ndt::replay {

// The NDTRACE_PYTHON_STACK place of `op`: "THREAD:STREAM-ORDINAL:INDEX".
std::string PythonStackPlace(const OpLocation& op);

// Its top-level place, "THREAD:STREAM-ORDINAL:tINDEX" (INDEX: `top_index`, its position among
// the lane's ops not made from inside another op): the one that stays put when the kernels a
// library call launches inside differ between runs, as cuDNN's engines picked by timing do.
std::string PythonStackTopPlace(const OpLocation& op, uint64_t top_index);

// Each of `ops`' top-level index in the trace at `path` (the run they were found in), one read
// for all; nullopt for one made from inside another op or not there.
StatusOr<std::vector<std::optional<uint64_t>>> TopLevelIndices(const std::string& path,
                                                               const std::vector<OpLocation>& ops);

// The Python stack the trace at `path` holds for the op at `op`'s place in its lane — at its
// top-level place `top_index` instead, when given — or nullopt when it holds none. Fails when
// the trace cannot be read, or when the op at that place is not `op`'s kind and name (that run
// went another way: its stack would be another op's).
StatusOr<std::optional<format::PythonStackRecord>> FindPythonStack(
    const std::string& path, const OpLocation& op,
    std::optional<uint64_t> top_index = std::nullopt);

}  // namespace ndt::replay
