// cache_write on the GPU over several steps: a state updated in place one row per step, readers
// of the old value ordered before the write, and the copying fallback, all against the CPU
// reference's run_step.
#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

constexpr int64_t kT = 6, kD = 4;
const Shape kCache{2, 2, kT, kD};
const TensorType kUpdate{{2, 2, 1, kD}, DType::f32};

// Steps t = 0..T-1 writing row t, comparing every output and the state with run_step.
void run_decode_steps(const Graph& g, const std::string& label) {
  auto session = build_session(g);
  auto rng = testing::rng_for(label);
  reference::Feeds persistent = reference::initial_parameters(g);
  for (int64_t t = 0; t < kT; ++t) {
    reference::Feeds in{{"update", testing::random_array(rng, kUpdate)},
                        {"pos", Array({1}, DType::i32, {static_cast<double>(kT - 1 - t)})}};
    for (const auto& [name, value] : in) session->set(name, value);
    session->step();
    auto want = reference::run_step(g, in, persistent);
    for (const auto& [name, value] : want) {
      EXPECT_TRUE(testing::elementwise_near(session->get(name), value, 1e-5))
          << label << " output " << name << " at step " << t;
    }
    EXPECT_TRUE(testing::elementwise_near(session->get("cache"), persistent.at("cache"), 1e-6))
        << label << " cache at step " << t;
  }
}

struct CacheGraph {
  Graph g;
  Tensor cache, next;
  CacheGraph() {
    cache = g.state("cache", kCache, Init::uniform(-1, 1, 5));
    next = cache_write(cache, g.input("update", kUpdate.shape), g.input("pos", {1}, DType::i32));
    g.assign(cache, next);
  }
};

TEST(CacheWrite, InPlaceRowPerStep) {
  CacheGraph c;
  c.g.output("total", sum(c.next, {2, 3}));
  run_decode_steps(c.g, "cache-in-place");
  auto session = build_session(c.g);
  // One cache in memory: no second buffer for the result.
  const uint64_t cache_bytes = static_cast<uint64_t>(numel(kCache)) * 4;
  EXPECT_LT(session->memory().arena_bytes, 2 * cache_bytes);
}

TEST(CacheWrite, ReaderOfTheOldValue) {
  CacheGraph c;
  c.g.output("old", sum(c.cache * c.cache, {2, 3}));
  c.g.output("new", sum(c.next, {2, 3}));
  run_decode_steps(c.g, "cache-old-reader");
}

TEST(CacheWrite, CopyingFallback) {
  CacheGraph c;
  c.g.output("mixed", sum(c.cache * c.next, {2, 3}));
  run_decode_steps(c.g, "cache-fallback");
}

TEST(CacheWrite, PrefillThenDecodePositionsPerBatch) {
  // Per-batch positions [B, L]; an out-of-range position skips its row on the GPU and raises
  // IndexError after the step.
  Graph g;
  Tensor cache = g.state("cache", kCache);
  Tensor next = cache_write(cache, g.input("update", {2, 2, 3, kD}),
                            g.input("pos", {2, 3}, DType::i32));
  g.assign(cache, next);
  auto session = build_session(g);
  auto rng = testing::rng_for("cache-prefill");
  Array update = testing::random_array(rng, {{2, 2, 3, kD}, DType::f32});
  Array pos({2, 3}, DType::i32, {0, 1, 2, 3, 5, 4});
  session->set("update", update);
  session->set("pos", pos);
  session->step();
  reference::Feeds persistent;
  reference::run_step(g, {{"update", update}, {"pos", pos}}, persistent);
  EXPECT_TRUE(testing::elementwise_near(session->get("cache"), persistent.at("cache"), 1e-6));

  Array bad({2, 3}, DType::i32, {0, 1, 2, 3, 5, static_cast<double>(kT)});
  EXPECT_THROW(reference::run_step(g, {{"update", update}, {"pos", bad}}, persistent), Error);
  session->set("pos", bad);
  // The bad row is skipped: every other row as in the last step.
  EXPECT_THROW(session->step(), IndexError);
  Array got = session->get("cache");
  EXPECT_TRUE(testing::elementwise_near(got, persistent.at("cache"), 1e-6));
}

}  // namespace
}  // namespace mn
