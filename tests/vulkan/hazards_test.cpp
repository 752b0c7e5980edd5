#include <gtest/gtest.h>

#include "vulkan/hazards.h"

namespace mn::vk {
namespace {

MemoryAccess read(uint64_t resource, uint64_t begin, uint64_t end) {
  return {resource, begin, end, false};
}
MemoryAccess write(uint64_t resource, uint64_t begin, uint64_t end) {
  return {resource, begin, end, true};
}

TEST(Hazards, ReadAfterWriteNeedsABarrier) {
  HazardTracker t;
  const MemoryAccess w[] = {write(1, 0, 100)};
  t.add(w);
  const MemoryAccess r[] = {read(1, 50, 60)};
  EXPECT_TRUE(t.conflicts(r));
}

TEST(Hazards, WriteAfterReadAndWriteAfterWriteNeedABarrier) {
  HazardTracker t;
  const MemoryAccess r[] = {read(1, 0, 100)};
  t.add(r);
  const MemoryAccess w1[] = {write(1, 99, 120)};
  EXPECT_TRUE(t.conflicts(w1));
  HazardTracker u;
  const MemoryAccess w[] = {write(2, 0, 8)};
  u.add(w);
  const MemoryAccess w2[] = {write(2, 4, 12)};
  EXPECT_TRUE(u.conflicts(w2));
}

TEST(Hazards, ReadsSharedAndDisjointRangesDoNot) {
  HazardTracker t;
  const MemoryAccess first[] = {read(1, 0, 100), write(1, 100, 200)};
  t.add(first);
  const MemoryAccess shared_read[] = {read(1, 0, 100)};
  EXPECT_FALSE(t.conflicts(shared_read));
  const MemoryAccess adjacent[] = {write(1, 200, 300), read(1, 50, 100)};
  EXPECT_FALSE(t.conflicts(adjacent));
  const MemoryAccess other_resource[] = {write(2, 0, 1000)};
  EXPECT_FALSE(t.conflicts(other_resource));
  const MemoryAccess empty[] = {write(1, 10, 10)};
  EXPECT_FALSE(t.conflicts(empty));
}

TEST(Hazards, ABarrierClearsTheWindow) {
  HazardTracker t;
  const MemoryAccess w[] = {write(1, 0, 100)};
  t.add(w);
  EXPECT_TRUE(t.conflicts(w));
  t.clear();
  EXPECT_FALSE(t.conflicts(w));
}

}  // namespace
}  // namespace mn::vk
