// What the diff needs to tell, in a kernel launch's captured whole allocation, the bytes the op
// reads or writes from the other tensors of a caching allocator's segment.
//
// A captured launch stores the whole allocation each of its pointers lies in
// (tracer/capture.h: "blob:in:alloc<id>"), once the launch's own stream has finished its work.
// Other streams may still be writing other tensors of the same segment (a data loader staging
// the next batch), so two runs' blobs may differ in bytes the op never touches. The op's
// tensors start where its pointer parameters point; a tensor ends at most where the next
// tensor known in that allocation starts (an offset some op of the trace points at), or at
// the allocation's end.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "formats/records.h"

namespace ndt::replay {

// A byte range [begin, end).
struct ByteRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool operator==(const ByteRange&) const = default;
};

// Where `a` and `b` differ, as at most `max_ranges` ascending, disjoint ranges: differing bytes
// closer than 64 bytes are one range, and past `max_ranges` the last range extends to the end
// of the longer buffer (a range may cover equal bytes, never leave out a differing one). Bytes
// only one buffer has differ.
std::vector<ByteRange> DifferingRanges(std::string_view a, std::string_view b,
                                       size_t max_ranges = 1024);

// Whether `bytes` holds, at an 8-byte-aligned position, a 64-bit little-endian value in
// [address, address + size): a pointer into that range, as a kernel's struct parameter or a
// table of pointers in device memory would.
bool HoldsPointerInto(std::string_view bytes, uint64_t address, uint64_t size);

// The offsets into each allocation that a run's ops point at (pointer arguments, digests'
// places): where tensors start. Bounded: after `max_starts` distinct places, new ones are not
// kept (regions then extend further: a difference is less often called placement). Not
// thread-safe; one per run.
class TensorStarts {
 public:
  explicit TensorStarts(size_t max_starts = size_t{1} << 14) : max_starts_(max_starts) {}

  void Observe(const format::OpRecord& op);

  // Where a tensor that op `sequence` (on `stream_id`) points at, at `offset` into
  // `allocation`, ends at most: the smallest start above `offset` that counts for that op, else
  // UINT64_MAX. A start counts when an op up to `sequence` pointed at it, or any op on another
  // stream: a later op on the same stream cannot have written before the op ran (stream
  // order), and a tensor a later op finds there may be a smaller one the caching allocator cut
  // from a freed block.
  uint64_t NextStart(uint64_t allocation, uint64_t offset, uint64_t sequence,
                     uint32_t stream_id) const;

  size_t size() const { return count_; }
  bool full() const { return count_ >= max_starts_; }

 private:
  struct Seen {
    uint64_t first_sequence = 0;
    uint32_t stream_id = 0;        // of the op that first pointed here, in sequence order
    bool several_streams = false;  // ops of several streams pointed here
  };
  void Note(const format::DevicePointer& pointer, const format::OpRecord& op);

  size_t max_starts_;
  size_t count_ = 0;
  std::map<uint64_t, std::map<uint64_t, Seen>> starts_;  // allocation id -> offset -> seen
};

}  // namespace ndt::replay
