// support::parallel_for, which compiles shaders and creates pipelines on several threads: every
// item runs once whatever the threads' count, the error reported is the lowest failing item's,
// not the first to fail in time, calls nest, and the threads are the same few from call to call.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
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

// A call from inside an item (a pool thread) finishes even while every pool thread is busy.
TEST(ParallelFor, CallsNest) {
  std::vector<std::atomic<int>> runs(16 * 16);
  support::parallel_for(16, 0, [&](size_t i) {
    support::parallel_for(16, 0, [&](size_t j) { ++runs[i * 16 + j]; });
  });
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

// A thousand calls run on the calling thread and the pool's: no thread is made per call (the
// kernel's thread ids, which a new thread does not reuse as pthread handles are).
TEST(ParallelFor, ThreadsAreKeptFromCallToCall) {
  std::mutex m;
  std::set<pid_t> ids;
  for (int call = 0; call < 1000; ++call) {
    support::parallel_for(8, 0, [&](size_t) {
      const std::lock_guard<std::mutex> lock(m);
      ids.insert(gettid());
    });
  }
  EXPECT_LE(ids.size(), static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace mn
