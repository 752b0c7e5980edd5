// Cache prefetches (plan/cache_prefetch.h): a launch at the end of each barrier window reading
// the weights the next window reads. The windows stay as they were, a prefetch reads only
// buffers nothing in the program writes, each read by the next window; training steps get
// none; and a session computes the same bits with them as without.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "codegen/lower_cache_prefetch.h"
#include "plan/barrier_windows.h"
#include "plan/cache_prefetch.h"
#include "plan/step_plan.h"
#include "support/expect_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

constexpr int64_t kWidth = 192;  // a weight of 192 × 192 f32: 144 KiB

// A vector through three layers, each a product with its own weight and a ReLU: three windows
// of one product each, the second and third reading a weight the window before does not.
Graph layer_chain() {
  Graph g;
  Tensor x = g.input("x", {1, kWidth});
  for (int i = 0; i < 3; ++i) {
    x = relu(matmul(x, g.parameter("w" + std::to_string(i), {kWidth, kWidth}, Init::zeros()), false,
                    true));
  }
  g.output("y", x);
  return g;
}

plan::PlanOptions prefetching(bool on) {
  plan::PlanOptions po;
  po.device.cache_prefetch = on;
  return po;
}

bool is_prefetch(const plan::PlannedLaunch& l) { return l.kernel.name == "cache_prefetch"; }

std::vector<plan::PlannedLaunch> without_prefetches(const plan::StepPlan& p) {
  std::vector<plan::PlannedLaunch> rest;
  for (const auto& l : p.launches) {
    if (!is_prefetch(l)) rest.push_back(l);
  }
  return rest;
}

TEST(CachePrefetch, EachWindowReadsTheNextOnesWeights) {
  const Graph g = layer_chain();
  const plan::StepPlan off = plan::make_step_plan(g, prefetching(false));
  const plan::StepPlan on = plan::make_step_plan(g, prefetching(true));
  const std::vector<plan::PlannedLaunch> kernels = without_prefetches(on);
  ASSERT_EQ(kernels.size(), off.launches.size());
  EXPECT_EQ(plan::barrier_windows(on.launches), plan::barrier_windows(off.launches));
  EXPECT_EQ(plan::barrier_windows(on.launches), plan::barrier_windows(kernels));

  std::set<int> written;
  for (const auto& l : on.launches) {
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (l.kernel.bindings[k].written && !is_prefetch(l)) written.insert(l.buffers[k]);
    }
  }
  const std::vector<int> ends = plan::barrier_run_ends(on.launches, true);
  std::set<NodeId> prefetched;
  int sink = -1;
  for (size_t i = 0; i < on.launches.size(); ++i) {
    const plan::PlannedLaunch& l = on.launches[i];
    if (!is_prefetch(l)) continue;
    // Last in its window, and the window after reads every buffer it reads.
    ASSERT_EQ(ends[i], static_cast<int>(i));
    ASSERT_LT(i + 1, on.launches.size());
    std::set<int> next_reads;
    for (size_t j = i + 1; j <= static_cast<size_t>(ends[i + 1]); ++j) {
      const plan::PlannedLaunch& n = on.launches[j];
      for (size_t k = 0; k < n.buffers.size(); ++k) {
        if (!n.kernel.bindings[k].written) next_reads.insert(n.buffers[k]);
      }
    }
    ASSERT_EQ(l.buffers.size(), l.kernel.bindings.size());
    for (size_t k = 0; k + 1 < l.buffers.size(); ++k) {
      const int b = l.buffers[k];
      const plan::PlannedBuffer& buf = on.buffers[static_cast<size_t>(b)];
      EXPECT_FALSE(l.kernel.bindings[k].written);
      EXPECT_TRUE(buf.persistent);
      EXPECT_FALSE(written.count(b)) << "a prefetch reads a buffer a kernel writes";
      EXPECT_TRUE(next_reads.count(b)) << "a prefetch reads what the next window does not";
      prefetched.insert(buf.node);
    }
    EXPECT_TRUE(l.kernel.bindings.back().written);
    if (sink < 0) sink = l.buffers.back();
    EXPECT_EQ(l.buffers.back(), sink) << "every prefetch writes the one sink";
  }
  std::set<NodeId> expected;
  for (const char* name : {"w1", "w2"}) expected.insert(on.persistents.at(name));
  EXPECT_EQ(prefetched, expected);
  ASSERT_GE(sink, 0);
  EXPECT_TRUE(on.buffers[static_cast<size_t>(sink)].persistent);
  EXPECT_EQ(on.buffers[static_cast<size_t>(sink)].bytes, codegen::kCachePrefetchSinkBytes);
}

TEST(CachePrefetch, NoneWhereNothingIsWorthIt) {
  const Graph chain = layer_chain();
  const plan::StepPlan p = plan::make_step_plan(chain, prefetching(true));
  // Buffers under the size floor, and windows over the byte cap, are left alone.
  plan::CachePrefetchOptions small;
  small.min_buffer_bytes = kWidth * kWidth * 4 + 1;
  EXPECT_TRUE(plan::plan_cache_prefetches(without_prefetches(p), p.buffers, {}, small).empty());
  plan::CachePrefetchOptions capped;
  capped.max_window_bytes = kWidth * kWidth * 4 - 1;
  EXPECT_TRUE(plan::plan_cache_prefetches(without_prefetches(p), p.buffers, {}, capped).empty());
  // A prefetch binds no more buffers than the device takes, its sink included.
  plan::CachePrefetchOptions one_binding;
  one_binding.max_bindings = 1;
  EXPECT_TRUE(
      plan::plan_cache_prefetches(without_prefetches(p), p.buffers, {}, one_binding).empty());
  {
    // The window after the first reads two weights.
    Graph two_weights;
    Tensor x = two_weights.input("x", {1, kWidth});
    Tensor h =
        relu(matmul(x, two_weights.parameter("w0", {kWidth, kWidth}, Init::zeros()), false, true));
    for (const char* name : {"w1", "w2"}) {
      two_weights.output(
          std::string("y") + name,
          matmul(h, two_weights.parameter(name, {kWidth, kWidth}, Init::zeros()), false, true));
    }
    for (uint32_t bindings : {16u, 2u}) {
      plan::PlanOptions po = prefetching(true);
      po.device.max_storage_buffers = bindings;
      std::vector<size_t> bound;
      for (const auto& l : plan::make_step_plan(two_weights, po).launches) {
        if (is_prefetch(l)) bound.push_back(l.buffers.size());
      }
      EXPECT_EQ(bound, std::vector<size_t>{bindings == 2 ? 2u : 3u}) << bindings << " bindings";
    }
  }
  // A buffer written outside the launches (an assignment's copy) is not read ahead either.
  std::vector<char> assigned(p.buffers.size(), 1);
  EXPECT_TRUE(plan::plan_cache_prefetches(without_prefetches(p), p.buffers, assigned).empty());

  // A training step updates its weights: no prefetch.
  Graph g;
  Tensor x = g.input("x", {4, kWidth});
  Tensor w = g.parameter("w", {kWidth, kWidth}, Init::zeros());
  Tensor v = g.parameter("v", {kWidth, kWidth}, Init::zeros());
  Tensor y = matmul(relu(matmul(x, w, false, true)), v, false, true);
  Tensor loss = mean(y * y);
  g.output("loss", loss);
  add_training_step(loss, Optimizer::sgd({.lr = 0.1}));
  for (const auto& l : plan::make_step_plan(g, prefetching(true)).launches) {
    EXPECT_FALSE(is_prefetch(l));
  }
}

TEST(CachePrefetch, SessionsComputeTheSameBits) {
  const Graph g = layer_chain();
  std::mt19937_64 rng = testing::rng_for("cache_prefetch");
  std::map<std::string, Array> feeds;
  feeds["x"] = testing::random_array(rng, g.node(g.inputs().front()).type);
  for (NodeId id : g.parameters()) {
    feeds[g.node(id).name] = testing::random_array(rng, g.node(id).type, -0.2, 0.2);
  }
  std::vector<double> results[2];
  size_t dispatches[2] = {0, 0};
  for (int on : {0, 1}) {
    testing::ScopedEnv env("MN_CACHE_PREFETCH", on ? "1" : "0");
    auto s = build_session(g);
    dispatches[on] = s->memory().dispatches;
    for (const auto& [name, value] : feeds) s->set(name, value);
    for (int step = 0; step < 2; ++step) s->step();
    results[on] = s->get("y").data;
  }
  EXPECT_EQ(dispatches[1], dispatches[0] + 2) << "a prefetch of w1 and one of w2";
  EXPECT_EQ(results[0], results[1]);
}

TEST(CachePrefetch, KernelRefusesWhatItCannotRead) {
  const codegen::DeviceTraits d;
  expect_error<Error>([&] { codegen::cache_prefetch_kernel({}, d); }, {"no buffer"});
  const std::vector<uint64_t> tiny{2};
  expect_error<Error>([&] { codegen::cache_prefetch_kernel(tiny, d); }, {"2 bytes"});
  const std::vector<uint64_t> sizes{100, 4096};
  const codegen::KernelLaunch k = codegen::cache_prefetch_kernel(sizes, d);
  ASSERT_EQ(k.bindings.size(), 3u);
  EXPECT_TRUE(k.bindings.back().written);
  EXPECT_EQ(k.groups[0], 1u);
}

}  // namespace
}  // namespace mn
