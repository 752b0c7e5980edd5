// The barrier windows of a dispatch order and the dependency depth that bounds them
// (plan/barrier_windows.h), on launches given by the buffers they read and write.
#include "plan/barrier_windows.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace mn::plan {
namespace {

// A launch reading `reads` and writing `writes` (buffer indices).
PlannedLaunch launch(std::vector<int> reads, std::vector<int> writes) {
  PlannedLaunch l;
  for (int b : reads) {
    l.buffers.push_back(b);
    l.kernel.bindings.push_back({codegen::ArgRef::input(0), false});
  }
  for (int b : writes) {
    l.buffers.push_back(b);
    l.kernel.bindings.push_back({codegen::ArgRef::output(0), true});
  }
  return l;
}

TEST(BarrierWindows, IndependentLaunchesShareAWindow) {
  const PlannedLaunch a = launch({}, {0}), b = launch({0}, {1}), c = launch({2}, {3});
  // c depends on nothing: beside a or beside b, two windows either way.
  EXPECT_EQ(barrier_windows({a, c, b}), 2u);
  EXPECT_EQ(barrier_windows({a, b, c}), 2u);
  EXPECT_EQ(dependency_depth({a, b, c}), 2u);
  EXPECT_EQ(barrier_run_ends({a, c, b}), (std::vector<int>{1, 1, 2}));
}

TEST(BarrierWindows, ReadsBeforeWritesAndWritesAfterWritesOrderLaunches) {
  const PlannedLaunch a = launch({}, {0}), b = launch({0}, {1});
  const PlannedLaunch overwrite = launch({}, {0});  // after b has read buffer 0
  EXPECT_EQ(barrier_windows({a, b, overwrite}), 3u);
  EXPECT_EQ(dependency_depth({a, b, overwrite}), 3u);
  // Two writers of one buffer, nothing between them.
  EXPECT_EQ(dependency_depth({a, launch({}, {0})}), 2u);
  // An order that interleaves two chains needs more windows than their depth.
  const PlannedLaunch x = launch({}, {5}), y = launch({5}, {6});
  EXPECT_EQ(barrier_windows({a, b, x, y}), 3u);
  EXPECT_EQ(barrier_windows({a, x, b, y}), 2u);
  EXPECT_EQ(dependency_depth({a, b, x, y}), 2u);
}

// Every launch checking its indices writes its own slot of the one index region: no conflict
// for the windows and the depth, one for the memory plan's runs.
TEST(BarrierWindows, IndexSlotsAreEachLaunchsOwn) {
  constexpr int kRegion = 9;
  PlannedLaunch a = launch({}, {0}), b = launch({}, {1});
  for (PlannedLaunch* l : {&a, &b}) {
    l->buffers.push_back(kRegion);
    l->kernel.bindings.push_back({codegen::ArgRef::index_errors(), true});
  }
  EXPECT_EQ(barrier_windows({a, b}), 1u);
  EXPECT_EQ(dependency_depth({a, b}), 1u);
  EXPECT_EQ(barrier_run_ends({a, b}), (std::vector<int>{0, 1}));
  EXPECT_EQ(barrier_run_ends({a, b}, true), (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace mn::plan
