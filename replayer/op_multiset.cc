#include "replayer/op_multiset.h"

#include <xxhash.h>

#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <variant>

#include "formats/trace_reader.h"
#include "replayer/op_compare.h"

namespace ndt::replay {
namespace {

// Feeds an element's fields to one XXH3-128 state; each field is length-prefixed or of fixed
// size, so that two different elements never feed the same bytes.
class ElementHash {
 public:
  ElementHash() : state_(XXH3_createState()) { XXH3_128bits_reset(state_.get()); }

  void Number(uint64_t value) { XXH3_128bits_update(state_.get(), &value, sizeof value); }
  void Text(std::string_view text) {
    Number(text.size());
    XXH3_128bits_update(state_.get(), text.data(), text.size());
  }
  void Buffer(const format::BufferDigest& d) {
    Text(d.role);
    Number(d.bytes);
    Number(static_cast<uint64_t>(d.dtype));
    Number(d.digest.lo);
    Number(d.digest.hi);
  }
  // Adds the element to `set` and starts the next one.
  void AddTo(OpMultiset& set) {
    const XXH128_hash_t h = XXH3_128bits_digest(state_.get());
    set += OpMultiset{1, h.low64, h.high64};
    XXH3_128bits_reset(state_.get());
  }

 private:
  struct Free {
    void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
  };
  std::unique_ptr<XXH3_state_t, Free> state_;
};

// Whether the argument is part of an op's content: what `diff` compares by value
// (FirstDifferentArgument, SameArgument), and captures' blob references (content ids: data).
bool ComparedByValue(const format::Argument& argument) {
  if (std::holds_alternative<format::DevicePointer>(argument.value) ||
      std::holds_alternative<format::Argument::Bytes>(argument.value)) {
    return false;
  }
  const std::string_view name = argument.name;
  // Also not the ordinals of the library objects a call names (a cuBLAS or cuDNN handle, a
  // cuRAND generator, an NCCL communicator): a framework keeps one per thread, so a task on
  // another thread uses another; the settings that shape the call are arguments of their own.
  return name != "insideOp" && name != "clique" && name != "first" && name != "event" &&
         name != "stream" && name != "eventStream" && name != "handle" && name != "generator" &&
         name != "comm" && name != "parentComm";
}

void HashOp(const format::OpRecord& op, ElementHash& h) {
  h.Number(static_cast<uint64_t>(op.kind));
  h.Text(op.name);
  h.Number(static_cast<uint64_t>(op.device_ordinal));
  h.Number(static_cast<uint64_t>(static_cast<int64_t>(op.status)));
  for (const format::Argument& argument : op.args) {
    if (!ComparedByValue(argument)) continue;
    h.Text(argument.name);
    h.Number(argument.value.index());
    std::visit(
        [&h](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t>) {
            h.Number(static_cast<uint64_t>(value));
          } else if constexpr (std::is_same_v<T, double>) {
            uint64_t bits;
            std::memcpy(&bits, &value, sizeof bits);
            h.Number(bits);
          } else if constexpr (std::is_same_v<T, std::string>) {
            h.Text(value);
          } else if constexpr (std::is_same_v<T, format::Argument::Dims>) {
            h.Number(value.size());
            for (int64_t dim : value) h.Number(static_cast<uint64_t>(dim));
          }
        },
        argument.value);
  }
  h.Number(op.rng.has_value());
  if (op.rng) {
    h.Text(op.rng->generator);
    h.Number(op.rng->seed);
    h.Number(op.rng->offset);
    h.Number(op.rng->subsequence);
    h.Text(op.rng->ordering);
  }
  h.Number(op.algorithm.has_value());
  if (op.algorithm) {
    h.Text(op.algorithm->library);
    h.Number(static_cast<uint64_t>(op.algorithm->id));
    h.Number(op.algorithm->knobs.size());
    for (const format::Knob& knob : op.algorithm->knobs) {
      h.Number(static_cast<uint64_t>(knob.type));
      h.Number(static_cast<uint64_t>(knob.value));
    }
    h.Text(op.algorithm->opaque);
  }
  h.Number(op.inputs.size());
  for (const format::BufferDigest& d : op.inputs) h.Buffer(d);
  h.Number(op.outputs.size());
  for (const format::BufferDigest& d : op.outputs) h.Buffer(d);
}

}  // namespace

std::optional<OpMultiset> ContentMultiset(const std::string& path) {
  auto reader = format::TraceReader::Open(path);
  if (!reader.ok()) return std::nullopt;
  (*reader)->ReadAhead(true);
  OpMultiset set;
  ElementHash h;
  format::Record record;
  while ((*reader)->Next(&record)) {
    if (const auto* op = std::get_if<format::OpRecord>(&record)) {
      if (IsLifecycleOp(*op)) continue;
      HashOp(*op, h);
      h.AddTo(set);
    } else if (const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record)) {
      // A recorded choice forced over what the program asked for is a difference `diff`
      // reports (ForcedOverRequest): an element, so that it is one here too.
      if (!ForcedOverRequest(*decision)) continue;
      h.Text("forced choice");
      for (const auto* choice : {&*decision->from_choice, &*decision->to_choice}) {
        h.Text(choice->library);
        h.Number(static_cast<uint64_t>(choice->id));
        h.Text(choice->opaque);
      }
      h.AddTo(set);
    } else if (const auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      for (const format::BufferDigest& allocation : state->allocations) {
        h.Text("state digest");
        h.Text(state->reason);
        h.Buffer(allocation);
        h.AddTo(set);
      }
    }
  }
  return set;
}

}  // namespace ndt::replay
