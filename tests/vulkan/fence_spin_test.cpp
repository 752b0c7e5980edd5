// How long a recording's wait polls its fence before blocking (vulkan/fence_spin.h).
#include <chrono>

#include <gtest/gtest.h>

#include "vulkan/fence_spin.h"

namespace mn::vk {
namespace {

using std::chrono::microseconds;

TEST(FenceSpin, PollsTheBaseWithoutAHistoryOrForShortRuns) {
  const FenceSpin spin;  // 2 ms, runs up to 16 ms
  EXPECT_EQ(poll_budget(spin, microseconds{0}, microseconds{5}), microseconds{2000});
  EXPECT_EQ(poll_budget(spin, microseconds{1000}, microseconds{5}), microseconds{2000});
}

// A 5 ms prompt: polled until 6.25 ms after its submission, not blocked on after 2 ms.
TEST(FenceSpin, PollsALittleLongerThanTheLastRunThatTookMoreThanTheBase) {
  const FenceSpin spin;
  EXPECT_EQ(poll_budget(spin, microseconds{5000}, microseconds{100}), microseconds{6150});
  EXPECT_EQ(poll_budget(spin, microseconds{16000}, microseconds{0}), microseconds{20000});
  // Called late: still the base from the call.
  EXPECT_EQ(poll_budget(spin, microseconds{5000}, microseconds{6000}), microseconds{2000});
}

// A training step of tens of ms blocks after the base: the wake-up is noise there.
TEST(FenceSpin, BlocksAfterTheBaseForLongRunsAndAtOnceWithoutABase) {
  const FenceSpin spin;
  EXPECT_EQ(poll_budget(spin, microseconds{70000}, microseconds{0}), microseconds{2000});
  const FenceSpin none{microseconds{0}};
  EXPECT_EQ(poll_budget(none, microseconds{5000}, microseconds{0}), microseconds{0});
}

}  // namespace
}  // namespace mn::vk
