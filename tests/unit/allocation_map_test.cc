// AllocationMap (tracer/allocation_map.h): naming raw device pointers by live allocation, as
// allocations are made, freed, refused a free and their ranges handed out again.
#include "tracer/allocation_map.h"

#include <catch2/catch.hpp>

namespace ndt::tracer {
namespace {

TEST_CASE("an allocation map names pointers by the allocation live at their address",
          "[tracer]") {
  AllocationMap map;
  CHECK_FALSE(map.Add(0x1000, 0x100, 1));  // replaced nothing
  CHECK_FALSE(map.Add(0x2000, 0x100, 2));
  REQUIRE(map.Find(0x10ff)->id == 1);
  CHECK_FALSE(map.Find(0x1100).has_value());
  CHECK_FALSE(map.FindNaming(0x1000)->suballocated);
  CHECK(map.FindNaming(0x1010)->suballocated);

  // Freed, then its range handed to another allocation: the new one names it.
  const std::optional<Allocation> freed = map.Remove(0x1000);
  REQUIRE(freed.has_value());
  CHECK(freed->id == 1);
  CHECK_FALSE(map.Find(0x1000).has_value());
  CHECK_FALSE(map.Add(0x1000, 0x80, 3));
  CHECK(map.Find(0x1000)->id == 3);
  CHECK_FALSE(map.Find(0x1080).has_value());

  // A free the driver refused: the allocation comes back as it was, suballocated included.
  const std::optional<Allocation> refused = map.Remove(0x1000);
  REQUIRE(refused.has_value());
  map.FindNaming(0x2008);
  const std::optional<Allocation> second = map.Remove(0x2000);
  REQUIRE(second.has_value());
  CHECK(second->suballocated);
  map.Restore(*second);
  map.Restore(*refused);
  CHECK(map.Find(0x1000)->id == 3);
  CHECK(map.Find(0x2008)->id == 2);
  CHECK(map.Find(0x2008)->suballocated);
  CHECK(map.size() == 2);

  // An allocation over a stale one (a free the tracer missed) replaces it, and says so (the
  // session then drops the allocations its threads keep).
  CHECK(map.Add(0x1040, 0x1000, 4));
  CHECK_FALSE(map.Find(0x1000).has_value());
  CHECK(map.Find(0x2008)->id == 4);
  CHECK(map.size() == 1);
  CHECK_FALSE(map.Remove(0x5000).has_value());
}

}  // namespace
}  // namespace ndt::tracer
