// AllocationMap: the live device allocations of one traced process, by address, so that a raw
// device pointer can be named canonically as (allocation id, offset).
//
// Not thread-safe: the owner (Session) serialises access under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace ndt::tracer {

// A live allocation: its canonical id (given by the caller: lineage.h's NewObjectId) and its
// extent. `suballocated`: a pointer into it at another offset than its base has been named
// (a caching allocator's segment holding several tensors). `context`: the CUDA context that was
// current when it was made (the device it is on: `device`); null when not known.
struct Allocation {
  uint64_t id = 0;
  uint64_t base = 0;
  uint64_t bytes = 0;
  bool suballocated = false;
  const void* context = nullptr;
  uint32_t device = 0;
  bool managed = false;  // cuMemAllocManaged: the host reads and writes it in place too
};

class AllocationMap {
 public:
  // Records a new allocation [base, base + bytes) named `id`. An allocation that overlaps a
  // recorded one replaces it (the driver reused the range; we missed a free): returns whether
  // one was replaced.
  bool Add(uint64_t base, uint64_t bytes, uint64_t id, const void* context = nullptr,
           uint32_t device = 0, bool managed = false);

  // Removes the allocation that starts at `base` and returns it, or nullopt if none does.
  std::optional<Allocation> Remove(uint64_t base);
  // Puts back an allocation Remove returned (its free failed), as it was.
  void Restore(const Allocation& allocation);

  // The allocation containing `address`, or nullopt. A zero-byte allocation contains only
  // its base address.
  std::optional<Allocation> Find(uint64_t address) const;
  // The same, marking the allocation `suballocated` when `address` is not its base.
  std::optional<Allocation> FindNaming(uint64_t address);

  // Every live allocation, by increasing base address.
  std::vector<Allocation> All() const;

  size_t size() const { return by_base_.size(); }

 private:
  std::map<uint64_t, Allocation> by_base_;  // keyed by base address
};

}  // namespace ndt::tracer
