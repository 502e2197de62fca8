// Where two captured allocations differ, pointers held in bytes, and where tensors start:
// what the diff tells a kernel's tensors from the rest of its captured segment with.
#include "replayer/capture_placement.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ndt::replay {
namespace {

using format::DevicePointer;
using format::OpRecord;

TEST_CASE("differing byte ranges join close differences and count bytes only one buffer has",
          "[replayer]") {
  std::string a(10000, 'a');
  std::string b = a;
  b[10] = 'x';
  b[40] = 'x';    // within 64 bytes of the first: one range
  b[5000] = 'x';  // far: its own range
  CHECK(DifferingRanges(a, b) == std::vector<ByteRange>{{10, 41}, {5000, 5001}});
  CHECK(DifferingRanges(a, a).empty());
  CHECK(DifferingRanges(a, b + "tail") ==
        std::vector<ByteRange>{{10, 41}, {5000, 5001}, {10000, 10004}});
}

TEST_CASE("differing byte ranges past the limit cover the rest, never leaving a difference out",
          "[replayer]") {
  std::string a(100000, 'a');
  std::string b = a;
  for (size_t i = 0; i < a.size(); i += 1000) b[i] = 'x';
  const std::vector<ByteRange> ranges = DifferingRanges(a, b, 4);
  REQUIRE(ranges.size() == 4);
  CHECK(ranges[2] == ByteRange{2000, 2001});
  CHECK(ranges[3] == ByteRange{3000, 100000});
}

TEST_CASE("a pointer into a range is found only at an aligned position", "[replayer]") {
  std::string bytes(24, '\0');
  const uint64_t address = 0x7f0000001000;
  std::memcpy(bytes.data() + 8, &address, 8);
  CHECK(HoldsPointerInto(bytes, 0x7f0000000000, 0x2000));
  CHECK_FALSE(HoldsPointerInto(bytes, 0x7f0000000000, 0x1000));  // one past the end
  std::string shifted(24, '\0');
  std::memcpy(shifted.data() + 4, &address, 8);
  CHECK_FALSE(HoldsPointerInto(shifted, 0x7f0000000000, 0x2000));
}

OpRecord PointingOp(uint64_t sequence, uint32_t stream, uint64_t offset) {
  OpRecord op;
  op.sequence = sequence;
  op.stream_id = stream;
  op.args = {{"arg0", DevicePointer{5, offset, 0x7f0000000000 + offset}},
             {"alloc5", DevicePointer{5, 0, 0x7f0000000000}}};  // a capture's base: no tensor
  return op;
}

TEST_CASE("a tensor start counts for an op unless only later ops of its own stream point there",
          "[replayer]") {
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  TensorStarts starts;
  starts.Observe(PointingOp(10, 1, 0));
  starts.Observe(PointingOp(20, 1, 1024));  // later, the op's stream
  starts.Observe(PointingOp(30, 2, 4096));  // later, another stream
  CHECK(starts.size() == 3);
  CHECK(starts.NextStart(5, 0, 10, 1) == 4096);
  CHECK(starts.NextStart(5, 0, 20, 1) == 1024);  // op 20 itself points there
  CHECK(starts.NextStart(5, 0, 10, 2) == 1024);  // for an op of stream 2
  CHECK(starts.NextStart(5, 4096, 10, 1) == kNone);
  CHECK(starts.NextStart(6, 0, 10, 1) == kNone);
  starts.Observe(PointingOp(5, 1, 1024));  // an earlier op pointed there too
  CHECK(starts.NextStart(5, 0, 10, 1) == 1024);
}

TEST_CASE("tensor starts are bounded", "[replayer]") {
  TensorStarts starts(2);
  for (uint64_t i = 0; i < 10; ++i) starts.Observe(PointingOp(i, 1, i * 256));
  CHECK(starts.size() == 2);
  CHECK(starts.full());
  CHECK(starts.NextStart(5, 0, 100, 1) == 256);
  CHECK(starts.NextStart(5, 256, 100, 1) == std::numeric_limits<uint64_t>::max());
}

}  // namespace
}  // namespace ndt::replay
