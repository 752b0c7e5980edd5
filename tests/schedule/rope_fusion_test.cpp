// Rotary embeddings applied by the kernels that read them (schedule/rope_fusion.h): a KV-cache
// attention step whose keys are rotated into the cache by the cache_write and whose query is
// rotated by the attention kernel as it loads it. The plan loses the rope launches; the values
// stay the reference's, at small and large positions, with and without Llama 3 scaling.
#include <gtest/gtest.h>

#include <algorithm>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "schedule/decode_plans.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

constexpr int64_t kBatch = 2, kHeads = 4, kKvHeads = 2, kDim = 16, kSlots = 200;

// One attention step over per-layer caches as build_lm_step makes it: rope(q), rope(k) at the
// block's positions, k and v written into their caches, q attending up to its position.
struct CacheStep {
  Graph g;
  // `key_dtype`: the dtype the keys arrive in; bf16 keys are widened before their rotation (as a
  // prompt's key projection in bf16 is), which the rotation then reads in place.
  CacheStep(int64_t block, const Llama3RopeScaling* scaling, bool q_also_output = false,
            DType cache = DType::f32, DType key_dtype = DType::f32) {
    Tensor xq = g.input("xq", {kBatch, kHeads, block, kDim}, cache);
    Tensor xk = g.input("xk", {kBatch, kKvHeads, block, kDim}, key_dtype);
    if (key_dtype != cache) xk = cast(xk, cache);
    Tensor v = g.input("v", {kBatch, kKvHeads, block, kDim}, cache);
    Tensor positions = g.input("positions", {kBatch, block}, DType::i32);
    Tensor rows = unsqueeze(positions, 1);  // [B, 1, L]: every head of a sequence
    auto rotate = [&](Tensor x) {
      return scaling ? rope_positions(x, rows, 500000.0, *scaling) : rope_positions(x, rows);
    };
    auto append = [&](const char* name, Tensor x) {
      Tensor state = g.state(name, {kBatch, kKvHeads, kSlots, kDim}, Init::zeros(), cache);
      Tensor updated = cache_write(state, x, positions);
      g.assign(state, updated);
      return updated;
    };
    Tensor q = rotate(xq);
    Tensor keys = append("k_cache", rotate(xk));
    Tensor values = append("v_cache", v);
    g.output("o", cached_attention(q, keys, values, rows));
    if (q_also_output) g.output("q", q);
  }
};

using testing::count_containing;

std::vector<std::string> launch_names(const Graph& g) {
  return testing::launch_names(g, testing::decode_device());
}

TEST(RopeFusion, DecodeStepHasNoRopeLaunch) {
  CacheStep step(/*block=*/1, nullptr);
  const std::vector<std::string> names = launch_names(step.g);
  const std::string all = ::testing::PrintToString(names);
  EXPECT_EQ(count_containing(names, "rope_positions"), 2u) << all;
  EXPECT_EQ(count_containing(names, "cache_write+prologue[rope_positions]"), 1u) << all;
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) {
                            return n.rfind("attention", 0) == 0 &&
                                   n.find("+prologue[rope_positions]") != std::string::npos;
                          }),
            1)
      << all;
  for (const std::string& n : names) EXPECT_NE(n.rfind("rope_positions", 0), 0u) << all;
}

// schedule/cache_append.h: the decoding attention reads the caches as they were and the new
// slot from the writes' updates, so the writes follow it (in place, no copy of the caches).
TEST(RopeFusion, DecodeAttentionReadsPastTheCacheWrites) {
  CacheStep step(/*block=*/1, nullptr);
  const std::vector<std::string> names = launch_names(step.g);
  const std::string all = ::testing::PrintToString(names);
  const auto at = [&](std::string_view part) {
    return std::find_if(names.begin(), names.end(), [&](const std::string& n) {
             return n.find(part) != std::string::npos;
           }) - names.begin();
  };
  ASSERT_EQ(count_containing(names, "+reads_new_slots"), 1u) << all;
  EXPECT_EQ(count_containing(names, "cache_write_copy"), 0u) << all;
  EXPECT_EQ(count_containing(names, "cache_write"), 2u) << all;
  EXPECT_LT(at("+reads_new_slots"), at("cache_write")) << all;
}

// A prefill block writes several slots per row: its attention waits for the writes.
TEST(RopeFusion, PrefillAttentionReadsTheWrittenCaches) {
  CacheStep step(/*block=*/4, nullptr);
  const std::vector<std::string> names = launch_names(step.g);
  EXPECT_EQ(count_containing(names, "+reads_new_slots"), 0u) << ::testing::PrintToString(names);
}

TEST(RopeFusion, ARopeReadTwiceKeepsItsKernel) {
  CacheStep step(/*block=*/1, nullptr, /*q_also_output=*/true);
  const std::vector<std::string> names = launch_names(step.g);
  const std::string all = ::testing::PrintToString(names);
  // q is an output as well: its rope runs once, on its own; k's still goes into the cache write.
  EXPECT_EQ(std::count(names.begin(), names.end(), "rope_positions"), 1) << all;
  EXPECT_EQ(count_containing(names, "cache_write+prologue[rope_positions]"), 1u) << all;
}

// Two steps on the device (lavapipe in CI) against reference::run_step: the second step's
// attention reads keys the first step rotated into the cache. 200 slots split the keys of a
// decoding query over four workgroups, the last of which combines them.
void expect_reference_steps(int64_t block, const Llama3RopeScaling* scaling,
                            const std::vector<std::vector<int32_t>>& steps, const std::string& what,
                            DType cache = DType::f32, double tolerance = 2e-5,
                            DType keys = DType::f32) {
  CacheStep step(block, scaling, false, cache, keys);
  std::mt19937_64 rng = testing::rng_for("rope_fusion_" + what);
  reference::Feeds persistent;
  for (NodeId id : step.g.states()) {
    persistent[step.g.node(id).name] = testing::random_array(rng, step.g.node(id).type);
  }
  auto session = build_session(step.g);
  for (const auto& [name, value] : persistent) session->set(name, value);
  for (size_t i = 0; i < steps.size(); ++i) {
    reference::Feeds inputs;
    for (NodeId id : step.g.inputs()) {
      const Node& n = step.g.node(id);
      if (n.name != "positions") inputs[n.name] = testing::random_array(rng, n.type);
    }
    std::vector<double> positions(steps[i].begin(), steps[i].end());
    inputs["positions"] = Array({kBatch, block}, DType::i32, positions);
    const Array expected = reference::run_step(step.g, inputs, persistent).at("o");
    for (const auto& [name, value] : inputs) session->set(name, value);
    session->step();
    EXPECT_LE(testing::scaled_error(session->get("o"), expected), tolerance)
        << what << ", step " << i;
  }
  for (const auto& [name, value] : persistent) {
    EXPECT_LE(testing::scaled_error(session->get(name), value), tolerance) << what << ": " << name;
  }
}

TEST(RopeFusion, DecodeValuesMatchTheReference) {
  expect_reference_steps(1, nullptr, {{3, 150}, {4, 151}}, "decode");
  const Llama3RopeScaling llama3{8.0, 1.0, 4.0, 16};
  expect_reference_steps(1, &llama3, {{70, 190}, {71, 191}}, "decode_llama3");
}

// 16-bit caches: the attention rounds the new slot's rotated key as the cache stores it.
TEST(RopeFusion, DecodeValuesWith16BitCachesMatchTheReference) {
  expect_reference_steps(1, nullptr, {{3, 150}, {4, 151}}, "decode_f16", DType::f16, 2e-3);
  expect_reference_steps(1, nullptr, {{3, 150}, {4, 151}}, "decode_bf16", DType::bf16, 1e-2);
}

TEST(RopeFusion, PrefillValuesMatchTheReference) {
  expect_reference_steps(4, nullptr, {{0, 1, 2, 3, 120, 121, 122, 123}, {4, 5, 6, 7, 124, 125, 126, 127}},
                         "prefill");
}

// Keys arriving in bf16 and widened for an f32 cache: the rotation reads the bf16 keys in place
// of the widening (whose kernel is gone), and the cache write takes that rotation into its
// loads, reading the bf16 keys (a write's update may differ from its cache in dtype): no
// rotation launch, no cast.
TEST(RopeFusion, KeysReadWidenedByTheirRotation) {
  for (int64_t block : {1, 4}) {
    CacheStep step(block, nullptr, false, DType::f32, DType::bf16);
    const std::vector<std::string> names = launch_names(step.g);
    const std::string all = ::testing::PrintToString(names);
    EXPECT_EQ(count_containing(names, "cast"), 0u) << all;
    EXPECT_EQ(std::count(names.begin(), names.end(), "rope_positions"), 0) << all;
    EXPECT_EQ(count_containing(names, "cache_write+prologue[rope_positions]"), 1u) << all;
  }
  expect_reference_steps(1, nullptr, {{3, 150}, {4, 151}}, "decode_bf16_keys", DType::f32, 2e-5,
                         DType::bf16);
  expect_reference_steps(4, nullptr,
                         {{0, 1, 2, 3, 120, 121, 122, 123}, {4, 5, 6, 7, 124, 125, 126, 127}},
                         "prefill_bf16_keys", DType::f32, 2e-5, DType::bf16);
}

}  // namespace
}  // namespace mn
