#include <gtest/gtest.h>

#include <random>

#include <meganeura/error.h>

#include "plan/memory_plan.h"

namespace mn::plan {
namespace {

// Alive at the same dispatch, by the definition (not the planner's own lifetimes_overlap): a
// persistent buffer is alive at every dispatch, another one from first_use to last_use
// inclusive.
bool alive_together(const BufferRequest& a, const BufferRequest& b) {
  if (a.persistent || b.persistent) return true;
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

void expect_valid(std::span<const BufferRequest> reqs, const MemoryPlan& plan, size_t align) {
  ASSERT_EQ(plan.offsets.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % align, 0u);
    EXPECT_LE(plan.offsets[i] + reqs[i].bytes, plan.arena_bytes);
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      if (!alive_together(reqs[i], reqs[j])) continue;
      bool disjoint = plan.offsets[i] + reqs[i].bytes <= plan.offsets[j] ||
                      plan.offsets[j] + reqs[j].bytes <= plan.offsets[i];
      EXPECT_TRUE(disjoint) << "live buffers " << i << " and " << j << " overlap";
    }
  }
}

TEST(MemoryPlan, OverlapIsSharingADispatch) {
  const BufferRequest a{64, 2, 5}, touching{64, 5, 9}, after{64, 6, 9}, inside{64, 3, 3};
  const BufferRequest held{64, 8, 8, true};
  EXPECT_TRUE(lifetimes_overlap(a, touching));  // dispatch 5 reads a and writes `touching`
  EXPECT_TRUE(lifetimes_overlap(touching, a));
  EXPECT_FALSE(lifetimes_overlap(a, after));
  EXPECT_TRUE(lifetimes_overlap(a, inside));
  EXPECT_TRUE(lifetimes_overlap(a, held));  // persistent: alive at every dispatch
  for (const auto& [x, y] : {std::pair{a, touching}, {a, after}, {a, inside}, {a, held}}) {
    EXPECT_EQ(lifetimes_overlap(x, y), alive_together(x, y));
  }
}

TEST(MemoryPlan, ChainReusesMemory) {
  // a -> b -> c -> d: each lives for two dispatches, so two slots suffice.
  std::vector<BufferRequest> reqs = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  auto plan = plan_memory(reqs, 256);
  expect_valid(reqs, plan, 256);
  EXPECT_EQ(plan.arena_bytes, 2048u);
  EXPECT_EQ(plan.naive_bytes, 4096u);
}

// Largest first leaves a hole here that taking the buffers by size times lifetime avoids: the
// plan keeps the smaller of its orders (12 units largest or longest-lived first, 9 so).
TEST(MemoryPlan, KeepsTheSmallestOfItsOrders) {
  constexpr size_t u = 256;
  std::vector<BufferRequest> reqs = {{5 * u, 6, 7}, {3 * u, 3, 4}, {6 * u, 2, 3}, {3 * u, 4, 7}};
  auto plan = plan_memory(reqs, u);
  expect_valid(reqs, plan, u);
  EXPECT_EQ(plan.arena_bytes, 9 * u);
}

TEST(MemoryPlan, PersistentNeverShares) {
  std::vector<BufferRequest> reqs = {{64, 0, 0, true}, {64, 1, 1}, {64, 2, 2, true}, {64, 3, 3}};
  auto plan = plan_memory(reqs, 64);
  expect_valid(reqs, plan, 64);
  EXPECT_EQ(plan.persistent_bytes, 128u);
  EXPECT_EQ(plan.arena_bytes, 192u);
}

TEST(MemoryPlan, RandomIntervalsNeverOverlapWhileLive) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> reqs;
    int n = 1 + rng() % 60;
    for (int i = 0; i < n; ++i) {
      int a = rng() % 40, len = rng() % 10;
      reqs.push_back({size_t(1 + rng() % 5000), a, a + len, rng() % 7 == 0});
    }
    auto plan = plan_memory(reqs, 16);
    expect_valid(reqs, plan, 16);
    EXPECT_LE(plan.arena_bytes, std::max<size_t>(plan.naive_bytes, 16));
  }
}

TEST(MemoryPlan, NoBufferStraddlesAChunk) {
  std::mt19937 rng(5);
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < 80; ++i) {
    int a = rng() % 30;
    reqs.push_back({size_t(1 + rng() % 1000), a, a + int(rng() % 6), rng() % 5 == 0});
  }
  auto plan = plan_memory(reqs, 16, 1024);
  expect_valid(reqs, plan, 16);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] / 1024, (plan.offsets[i] + reqs[i].bytes - 1) / 1024) << i;
  }
  std::vector<BufferRequest> too_big = {{2048, 0, 0}};
  EXPECT_THROW(plan_memory(too_big, 16, 1024), Error);
}

TEST(MemoryPlan, RejectsBadAlignment) {
  std::vector<BufferRequest> reqs = {{8, 0, 0}};
  EXPECT_THROW(plan_memory(reqs, 24), Error);
}

}  // namespace
}  // namespace mn::plan
