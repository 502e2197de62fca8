#include "replayer/python_stacks.h"

#include <map>
#include <memory>

#include "formats/trace_reader.h"
#include "replayer/op_compare.h"

namespace ndt::replay {

std::string PythonStackPlace(const OpLocation& op) {
  return std::to_string(op.thread_id) + ":" + std::to_string(op.lane & 0xffffffffu) + ":" +
         std::to_string(op.lane_index);
}

StatusOr<std::optional<format::PythonStackRecord>> FindPythonStack(const std::string& path,
                                                                   const OpLocation& op) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  LaneKeys lanes;
  std::map<uint64_t, uint64_t> counts;
  std::optional<uint64_t> sequence;  // of the op at that place in this trace
  format::Record record;
  while ((*reader)->Next(&record)) {
    if (const auto* found = std::get_if<format::OpRecord>(&record)) {
      if (sequence || IsLifecycleOp(*found)) continue;
      const uint64_t lane = lanes.Key(*found);
      if (lane != op.lane || counts[lane]++ != op.lane_index) continue;
      if (found->kind != op.kind || found->name != op.name) {
        return Status::Error(path + ": op " + std::to_string(found->sequence) +
                             " at that place is " + found->name + ", not " + op.name);
      }
      sequence = found->sequence;
    } else if (auto* stack = std::get_if<format::PythonStackRecord>(&record)) {
      if (sequence && stack->op_sequence == *sequence) return std::optional(std::move(*stack));
    }
  }
  return std::optional<format::PythonStackRecord>();
}

}  // namespace ndt::replay
