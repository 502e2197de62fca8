#include "replayer/capture_placement.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace ndt::replay {
namespace {

// Differing bytes closer than this are one range.
constexpr uint64_t kJoinGap = 64;

}  // namespace

std::vector<ByteRange> DifferingRanges(std::string_view a, std::string_view b, size_t max_ranges) {
  std::vector<ByteRange> ranges;
  const uint64_t common = std::min(a.size(), b.size());
  const uint64_t longer = std::max(a.size(), b.size());
  const auto add = [&](uint64_t begin, uint64_t end) {
    if (!ranges.empty() && begin <= ranges.back().end + kJoinGap) {
      ranges.back().end = std::max(ranges.back().end, end);
      return true;
    }
    if (ranges.size() == std::max<size_t>(max_ranges, 1)) {
      ranges.back().end = longer;  // cover the rest: never leave a differing byte out
      return false;
    }
    ranges.push_back({begin, end});
    return true;
  };
  // Compare in blocks first: equal blocks (most of them) are skipped by memcmp.
  constexpr uint64_t kBlock = 4096;
  for (uint64_t block = 0; block < common; block += kBlock) {
    const uint64_t end = std::min(common, block + kBlock);
    if (std::memcmp(a.data() + block, b.data() + block, end - block) == 0) continue;
    for (uint64_t i = block; i < end; ++i) {
      if (a[i] == b[i]) continue;
      uint64_t j = i + 1;
      while (j < end && a[j] != b[j]) ++j;
      if (!add(i, j)) return ranges;
      i = j;
    }
  }
  if (longer > common) add(common, longer);
  return ranges;
}

bool HoldsPointerInto(std::string_view bytes, uint64_t address, uint64_t size) {
  for (size_t at = 0; at + 8 <= bytes.size(); at += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + at, 8);  // little-endian hosts only, as the tracer
    if (word >= address && word - address < size) return true;
  }
  return false;
}

void TensorStarts::Note(const format::DevicePointer& pointer, const format::OpRecord& op) {
  if (pointer.allocation_id == 0) return;
  auto& offsets = starts_[pointer.allocation_id];
  auto it = offsets.find(pointer.offset);
  if (it == offsets.end()) {
    if (full()) {
      if (offsets.empty()) starts_.erase(pointer.allocation_id);
      return;
    }
    offsets.emplace(pointer.offset, Seen{op.sequence, op.stream_id, false});
    ++count_;
    return;
  }
  Seen& seen = it->second;
  if (op.stream_id != seen.stream_id) seen.several_streams = true;
  if (op.sequence < seen.first_sequence) {
    seen.first_sequence = op.sequence;
    seen.stream_id = op.stream_id;
  }
}

void TensorStarts::Observe(const format::OpRecord& op) {
  for (const format::Argument& argument : op.args) {
    // A capture's `alloc<id>` names an allocation's base, not a tensor.
    if (argument.name.rfind("alloc", 0) == 0) continue;
    if (const auto* p = std::get_if<format::DevicePointer>(&argument.value)) Note(*p, op);
  }
  for (const auto& digest : op.inputs) Note(digest.pointer, op);
  for (const auto& digest : op.outputs) Note(digest.pointer, op);
}

uint64_t TensorStarts::NextStart(uint64_t allocation, uint64_t offset, uint64_t sequence,
                                 uint32_t stream_id) const {
  const auto found = starts_.find(allocation);
  if (found == starts_.end()) return std::numeric_limits<uint64_t>::max();
  for (auto it = found->second.upper_bound(offset); it != found->second.end(); ++it) {
    const Seen& seen = it->second;
    if (seen.first_sequence <= sequence || seen.several_streams || seen.stream_id != stream_id) {
      return it->first;
    }
  }
  return std::numeric_limits<uint64_t>::max();
}

}  // namespace ndt::replay
