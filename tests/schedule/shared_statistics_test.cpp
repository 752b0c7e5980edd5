// Statistics computed once (schedule/shared_statistics.h): a batch norm's backward variance
// read from its forward one, repeated reductions merged, large results and other axes left
// alone, and the values as before.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>

#include "ir/ops/reduce.h"
#include "optimize/optimize.h"
#include "plan/step_plan.h"
#include "schedule/batch_norm_step.h"
#include "schedule/sgd_step.h"
#include "schedule/fusion.h"
#include "schedule/gpu_lowering.h"
#include "schedule/shared_statistics.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

using testing::BatchNormStep;

// The needed nodes of `op` whose input is node `input`.
int readers(const Graph& g, std::string_view op, NodeId input) {
  const std::vector<char> needed = schedule::needed_nodes(g);
  int count = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    count += needed[i] && n.op_name() == op && n.inputs.size() == 1 && n.inputs[0] == input;
  }
  return count;
}

NodeId only_conv(const Graph& g) {
  NodeId conv = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g.node(static_cast<NodeId>(i)).op_name() == "conv2d") conv = static_cast<NodeId>(i);
  }
  return conv;
}

TEST(SharedStatistics, BatchNormBackwardReadsTheForwardVariance) {
  BatchNormStep m;
  // As the planner has it: optimized, then lowered.
  const Graph lowered = schedule::lower_for_gpu(optimize::optimize(m.g).graph);
  ASSERT_GE(readers(lowered, "variance", only_conv(lowered)), 2);
  const std::optional<Graph> shared = schedule::share_statistics(lowered);
  ASSERT_TRUE(shared);
  EXPECT_EQ(readers(*shared, "variance", only_conv(*shared)), 1);

  // The same step, up to the rescaling's rounding.
  auto rng = testing::rng_for("shared_statistics/batch_norm");
  const int64_t n = BatchNormStep::kN, c = BatchNormStep::kC, hw = BatchNormStep::kHW;
  const Array x = testing::random_array(rng, {{n, c, hw, hw}, DType::f32}, -1.0, 1.0);
  const testing::StepResult want = testing::sgd_step(lowered, x);
  const testing::StepResult got = testing::sgd_step(*shared, x);
  EXPECT_TRUE(testing::elementwise_near(got.outputs.at("loss"), want.outputs.at("loss"), 1e-6));
  for (const char* p : {"w", "gamma", "beta", "running_mean", "running_var"}) {
    EXPECT_TRUE(testing::elementwise_near(got.persistent.at(p), want.persistent.at(p), 1e-6))
        << p;
  }

  // The planner applies it (after the e-graph and the lowering).
  const plan::StepPlan p = plan::make_step_plan(m.g, plan::PlanOptions{});
  EXPECT_EQ(readers(p.graph, "variance", only_conv(p.graph)), 1);
}

TEST(SharedStatistics, RepeatedReductionsAreMergedAndOthersKept) {
  Graph g;
  Tensor x = g.input("x", {64, 256});
  Tensor a = sum(x, {1});
  Tensor b = sum(x, {1});
  Tensor c = sum(x, {0});  // other axes
  g.output("ab", a * b);
  g.output("c", c);
  const Graph lowered = schedule::lower_for_gpu(g);
  const std::optional<Graph> shared = schedule::share_statistics(lowered);
  ASSERT_TRUE(shared);
  EXPECT_EQ(readers(*shared, "sum", 0), 2);  // sum over axis 1 once, over axis 0 once

  // A result not much smaller than its input stays where it is.
  Graph wide;
  Tensor y = wide.input("y", {1024, 4});
  wide.output("s", sum(y, {1}) * sum(y, {1}));
  EXPECT_FALSE(schedule::share_statistics(schedule::lower_for_gpu(wide)));
}

TEST(SharedStatistics, VariancesOfOtherAxesOrInputsStaySeparate) {
  Graph g;
  Tensor x = g.input("x", {32, 64});
  Tensor y = g.input("y", {32, 64});
  g.output("a", variance(x, {0}, false, 1));
  g.output("b", variance(x, {1}, true, 0));
  g.output("c", variance(y, {0}, true, 0));
  EXPECT_FALSE(schedule::share_statistics(schedule::lower_for_gpu(g)));

  // Same input and axes, another correction and keepdims: rescaled from the first.
  Graph h;
  Tensor u = h.input("u", {32, 64});
  h.output("unbiased", variance(u, {0}, false, 1));
  h.output("biased", variance(u, {0}, true, 0));
  const Graph lowered = schedule::lower_for_gpu(h);
  const std::optional<Graph> shared = schedule::share_statistics(lowered);
  ASSERT_TRUE(shared);
  EXPECT_EQ(readers(*shared, "variance", 0), 1);
  auto rng = testing::rng_for("shared_statistics/variance");
  reference::Feeds inputs{{"u", testing::random_array(rng, {{32, 64}, DType::f32}, -2.0, 2.0)}};
  reference::Feeds unused_a, unused_b;
  const auto want = reference::run_step(lowered, inputs, unused_a);
  const auto got = reference::run_step(*shared, inputs, unused_b);
  EXPECT_TRUE(testing::elementwise_near(got.at("biased"), want.at("biased"), 1e-6));
  EXPECT_EQ(got.at("unbiased").data, want.at("unbiased").data);

  // Axes as the op reads them, as nodes made without the public function carry them (an
  // importer's, a decomposition's): a negative axis is its positive twin, and none means all.
  Graph k;
  Tensor z = k.input("u", {32, 64});
  auto raw_variance = [&](std::vector<int64_t> axes, bool keepdims, int64_t correction) {
    return k.apply("variance", VarianceAttrs{std::move(axes), keepdims, correction}, {z});
  };
  k.output("last_unbiased", raw_variance({-1}, false, 1));
  k.output("last_biased", raw_variance({1}, true, 0));
  k.output("all_unbiased", raw_variance({}, false, 1));
  k.output("all_biased", raw_variance({0, 1}, true, 0));
  const Graph lowered_k = schedule::lower_for_gpu(k);
  const std::optional<Graph> shared_k = schedule::share_statistics(lowered_k);
  ASSERT_TRUE(shared_k);
  EXPECT_EQ(readers(*shared_k, "variance", 0), 2);
  reference::Feeds unused_c, unused_d;
  const auto want_k = reference::run_step(lowered_k, inputs, unused_c);
  const auto got_k = reference::run_step(*shared_k, inputs, unused_d);
  for (const char* name : {"last_unbiased", "last_biased", "all_unbiased", "all_biased"}) {
    EXPECT_TRUE(testing::elementwise_near(got_k.at(name), want_k.at(name), 1e-6)) << name;
  }
}

}  // namespace
}  // namespace mn
