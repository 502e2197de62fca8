#include "tracer/allocation_map.h"

namespace ndt::tracer {

bool AllocationMap::Add(uint64_t base, uint64_t bytes, uint64_t id, const void* context,
                        uint32_t device, bool managed) {
  const uint64_t end = base + (bytes == 0 ? 1 : bytes);
  // Drop stale entries overlapping [base, end): the first one that starts before base and
  // reaches into it, then every one that starts inside it.
  const size_t before_size = by_base_.size();
  auto it = by_base_.lower_bound(base);
  if (it != by_base_.begin()) {
    auto before = std::prev(it);
    const uint64_t before_end =
        before->second.base + (before->second.bytes == 0 ? 1 : before->second.bytes);
    if (before_end > base) by_base_.erase(before);
  }
  while (it != by_base_.end() && it->first < end) it = by_base_.erase(it);
  const bool replaced = by_base_.size() != before_size;
  by_base_[base] = Allocation{id, base, bytes, false, context, device, managed};
  return replaced;
}

std::optional<Allocation> AllocationMap::Remove(uint64_t base) {
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return std::nullopt;
  Allocation allocation = it->second;
  by_base_.erase(it);
  return allocation;
}

void AllocationMap::Restore(const Allocation& allocation) {
  Add(allocation.base, allocation.bytes, allocation.id);
  by_base_[allocation.base] = allocation;
}

std::optional<Allocation> AllocationMap::Find(uint64_t address) const {
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  const Allocation& allocation = it->second;
  const uint64_t extent = allocation.bytes == 0 ? 1 : allocation.bytes;
  if (address - allocation.base < extent) return allocation;
  return std::nullopt;
}

std::optional<Allocation> AllocationMap::FindNaming(uint64_t address) {
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  Allocation& allocation = it->second;
  const uint64_t extent = allocation.bytes == 0 ? 1 : allocation.bytes;
  if (address - allocation.base >= extent) return std::nullopt;
  if (address != allocation.base) allocation.suballocated = true;
  return allocation;
}

std::vector<Allocation> AllocationMap::All() const {
  std::vector<Allocation> all;
  all.reserve(by_base_.size());
  for (const auto& entry : by_base_) all.push_back(entry.second);
  return all;
}

}  // namespace ndt::tracer
