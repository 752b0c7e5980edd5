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

// Flow launches (codegen/flow_kernel.h) wait for the flow launches they conflict with; a
// barrier still goes where any other operation is involved.
TEST(OrderOperations, FlowLaunchesWaitWhereOthersNeedBarriers) {
  const MemoryAccess a[] = {write(1, 0, 100)};                       // 0 writes x
  const MemoryAccess b[] = {read(1, 0, 100), write(1, 100, 200)};    // 1 reads x, writes y
  const MemoryAccess c[] = {read(1, 100, 200), write(1, 300, 400)};  // 2 reads y
  const MemoryAccess d[] = {read(1, 0, 50), write(1, 400, 500)};     // 3 reads x only
  for (bool flow : {false, true}) {
    const OrderedOperation ops[] = {{a, flow}, {b, flow}, {c, flow}, {d, flow}};
    const Ordering o = order_operations(ops);
    if (!flow) {
      EXPECT_EQ(o.barrier_before, (std::vector<char>{0, 1, 1, 0}));
      for (const auto& w : o.waits) EXPECT_TRUE(w.empty());
    } else {
      EXPECT_EQ(o.barrier_before, (std::vector<char>{0, 0, 0, 0}));
      EXPECT_EQ(o.waits[0], std::vector<uint32_t>{});
      EXPECT_EQ(o.waits[1], std::vector<uint32_t>{0});
      EXPECT_EQ(o.waits[2], std::vector<uint32_t>{1});
      EXPECT_EQ(o.waits[3], std::vector<uint32_t>{0}) << "x only: not after 1 or 2";
    }
  }
}

TEST(OrderOperations, WaitsImpliedByAnotherAreLeftOut) {
  // 2 reads what 0 and 1 wrote, and 1 already waited for 0: 2 waits for 1 alone. 3 overwrites
  // what 0, 1 and 2 read or wrote: 2 implies the rest.
  const MemoryAccess a[] = {write(1, 0, 100)};
  const MemoryAccess b[] = {read(1, 0, 100), write(1, 100, 200)};
  const MemoryAccess c[] = {read(1, 0, 200), write(1, 200, 300)};
  const MemoryAccess d[] = {write(1, 0, 300)};
  const OrderedOperation ops[] = {{a, true}, {b, true}, {c, true}, {d, true}};
  const Ordering o = order_operations(ops);
  EXPECT_EQ(o.waits[2], std::vector<uint32_t>{1});
  EXPECT_EQ(o.waits[3], std::vector<uint32_t>{2});
  // Without the chain, each conflict is waited for: 3 writes what two unrelated launches wrote.
  const MemoryAccess e[] = {write(1, 400, 500)};
  const MemoryAccess f[] = {write(1, 0, 500)};
  const OrderedOperation apart[] = {{a, true}, {e, true}, {f, true}};
  const Ordering p = order_operations(apart);
  EXPECT_EQ(p.waits[2], (std::vector<uint32_t>{1, 0}));
}

TEST(OrderOperations, AnotherOperationInTheWayIsABarrier) {
  // 1 is a copy (not a flow launch): the flow launch reading what it wrote gets a barrier, and
  // after the barrier waits for nothing before it.
  const MemoryAccess a[] = {write(1, 0, 100)};
  const MemoryAccess copy[] = {read(1, 0, 100), write(2, 0, 100)};
  const MemoryAccess c[] = {read(2, 0, 100), read(1, 0, 100), write(1, 200, 300)};
  const OrderedOperation ops[] = {{a, true}, {copy, false}, {c, true}};
  const Ordering o = order_operations(ops);
  EXPECT_EQ(o.barrier_before, (std::vector<char>{0, 1, 1}));
  EXPECT_TRUE(o.waits[2].empty());
  // A flow launch after unrelated others: no barrier, no wait.
  const MemoryAccess far[] = {write(3, 0, 4)};
  const OrderedOperation apart[] = {{a, true}, {copy, false}, {far, true}};
  const Ordering p = order_operations(apart);
  EXPECT_EQ(p.barrier_before, (std::vector<char>{0, 1, 0}));
  EXPECT_TRUE(p.waits[2].empty());
}

}  // namespace
}  // namespace mn::vk
