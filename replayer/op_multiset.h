// Whether two runs made the same ops on the same data, only in another order or on other
// threads: a thread pool or work queue hands tasks to whichever thread is free, so the ops each
// thread issues (a lane, the unit `diff` aligns runs by) vary in a deterministic program while
// what is computed does not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ndt::replay {

// A trace's ops as a multiset: how many, and the sum (mod 2^128) of a 128-bit hash of each
// op's content: its kind, name, device, status, the arguments `diff` compares by value (not
// device pointers, kernel parameter bytes, the pooled `event` and streams, measurements,
// `insideOp`, `clique`, the ordinals of handles, generators and communicators) and captures'
// blob references (content ids), its RNG state, algorithm choice, and the role, size, type and
// digest of every buffer it read and wrote; each state digest's allocation contents likewise,
// and each recorded choice forced over the program's request (ForcedOverRequest). Not the op's
// sequence, thread, stream, time, range or module ordinal. Lifecycle ops are left out, as `diff`
// leaves them.
struct OpMultiset {
  uint64_t ops = 0;
  uint64_t sum_lo = 0;
  uint64_t sum_hi = 0;
  bool operator==(const OpMultiset&) const = default;
  OpMultiset& operator+=(const OpMultiset& other) {  // the union of two traces' ops
    const uint64_t lo = sum_lo + other.sum_lo;
    sum_hi += other.sum_hi + (lo < sum_lo ? 1 : 0);
    sum_lo = lo;
    ops += other.ops;
    return *this;
  }
};

// Reads the whole trace; nullopt if it cannot be opened.
std::optional<OpMultiset> ContentMultiset(const std::string& path);

}  // namespace ndt::replay
