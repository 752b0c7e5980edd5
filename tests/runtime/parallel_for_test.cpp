// support::parallel_for, which compiles shaders and creates pipelines on several threads: every
// item runs once whatever the threads' count, and the error reported is the lowest failing
// item's, not the first to fail in time.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/parallel_for.h"

namespace mn {
namespace {

TEST(ParallelFor, EveryItemRunsOnce) {
  for (unsigned threads : {0u, 1u, 3u, 64u}) {
    std::vector<std::atomic<int>> runs(100);
    support::parallel_for(runs.size(), threads, [&](size_t i) { ++runs[i]; });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i << ", " << threads;
  }
  support::parallel_for(0, 4, [](size_t) { FAIL() << "an item of none"; });
}

TEST(ParallelFor, TheLowestFailingItemsErrorAfterEveryItemRan) {
  std::atomic<int> ran{0};
  try {
    support::parallel_for(50, 4, [&](size_t i) {
      ++ran;
      if (i == 7 || i == 31) throw std::runtime_error("item " + std::to_string(i));
    });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "item 7");
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace mn
