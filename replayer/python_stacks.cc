#include "replayer/python_stacks.h"

#include <algorithm>
#include <map>
#include <memory>

#include "formats/trace_reader.h"
#include "replayer/op_compare.h"

namespace ndt::replay {

std::string PythonStackPlace(const OpLocation& op) {
  return std::to_string(op.thread_id) + ":" + std::to_string(op.lane & 0xffffffffu) + ":" +
         std::to_string(op.lane_index);
}

namespace {

bool MadeInsideAnother(const format::OpRecord& op) {
  return std::any_of(op.args.begin(), op.args.end(),
                     [](const format::Argument& argument) { return argument.name == "insideOp"; });
}

// Counts each lane's ops as the tracer does for NDTRACE_PYTHON_STACK (tracer/python_stack.h),
// both ways: every op that is not a lifecycle op, and those of them made inside no other op.
struct LanePositions {
  LaneKeys lanes;
  std::map<uint64_t, uint64_t> all;
  std::map<uint64_t, uint64_t> top;
  // `op`'s lane key and positions; false for a lifecycle op, which has none.
  bool Place(const format::OpRecord& op, uint64_t* lane, uint64_t* index,
             std::optional<uint64_t>* top_index) {
    if (IsLifecycleOp(op)) return false;
    *lane = lanes.Key(op);
    *index = all[*lane]++;
    *top_index = MadeInsideAnother(op) ? std::nullopt : std::optional(top[*lane]++);
    return true;
  }
};

}  // namespace

std::string PythonStackTopPlace(const OpLocation& op, uint64_t top_index) {
  return std::to_string(op.thread_id) + ":" + std::to_string(op.lane & 0xffffffffu) + ":t" +
         std::to_string(top_index);
}

StatusOr<std::vector<std::optional<uint64_t>>> TopLevelIndices(const std::string& path,
                                                               const std::vector<OpLocation>& ops) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::vector<std::optional<uint64_t>> indices(ops.size());
  LanePositions positions;
  format::Record record;
  while ((*reader)->Next(&record)) {
    const auto* found = std::get_if<format::OpRecord>(&record);
    uint64_t lane = 0, index = 0;
    std::optional<uint64_t> top_index;
    if (found == nullptr || !positions.Place(*found, &lane, &index, &top_index)) continue;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (found->sequence == ops[i].sequence) indices[i] = top_index;
    }
  }
  return indices;
}

StatusOr<std::optional<format::PythonStackRecord>> FindPythonStack(
    const std::string& path, const OpLocation& op, std::optional<uint64_t> top_index) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  LanePositions positions;
  std::optional<uint64_t> sequence;  // of the op at that place in this trace
  format::Record record;
  while ((*reader)->Next(&record)) {
    if (const auto* found = std::get_if<format::OpRecord>(&record)) {
      uint64_t lane = 0, index = 0;
      std::optional<uint64_t> top;
      if (sequence || !positions.Place(*found, &lane, &index, &top) || lane != op.lane) continue;
      if (top_index ? top != top_index : index != op.lane_index) continue;
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
