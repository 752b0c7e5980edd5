// Recomputation in the backward pass (schedule/rematerialize.h): which forward values the
// backward readers get copies of, that the step computes the same values with them, that the
// plan's arena shrinks, and that the copies and other backward kernels launch in the backward
// pass rather than as soon as their inputs exist.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include <meganeura/autodiff.h>
#include <meganeura/causal_lm.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>

#include "plan/step_plan.h"
#include "schedule/fusion.h"
#include "schedule/gpu_lowering.h"
#include "schedule/rematerialize.h"
#include "schedule/sgd_step.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

// A SwiGLU block trained by SGD: silu(x·Wgᵀ) · (x·Wuᵀ) → down projection → mean square.
struct SwiGlu {
  Graph g;
  SwiGlu() {
    Tensor x = g.input("x", {6, 8});
    Tensor wg = g.parameter("wg", {12, 8}, Init::normal(0.0, 0.5, 1));
    Tensor wu = g.parameter("wu", {12, 8}, Init::normal(0.0, 0.5, 2));
    Tensor wd = g.parameter("wd", {8, 12}, Init::normal(0.0, 0.5, 3));
    Tensor h = silu(matmul(x, wg, false, true)) * matmul(x, wu, false, true);
    Tensor y = matmul(h, wd, false, true);
    Tensor loss = mean(y * y);
    g.output("loss", loss);
    add_training_step(loss, Optimizer::sgd({.lr = 0.1}));
  }
};

bool reads(const Node& n, NodeId v) {
  return std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end();
}

TEST(Rematerialize, BackwardReadsCopiesOfSiluAndItsProduct) {
  SwiGlu m;
  const Graph lowered = schedule::lower_for_gpu(m.g);
  const std::optional<schedule::Rematerialized> result =
      schedule::rematerialize(lowered, {.min_elements = 1});
  ASSERT_TRUE(result);
  const schedule::Rematerialized& r = *result;
  const Graph& g = r.graph;
  ASSERT_EQ(r.copies.size(), g.size());
  const std::vector<char> forward = schedule::forward_nodes(g);
  std::vector<std::string> copied;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!r.copies[i]) continue;
    copied.emplace_back(g.node(static_cast<NodeId>(i)).op_name());
    EXPECT_FALSE(forward[i]) << "a copy is part of the forward pass";
  }
  std::sort(copied.begin(), copied.end());
  EXPECT_EQ(copied, (std::vector<std::string>{"mul", "silu"}));
  // No backward node reads the forward silu or product any more; their copies are read.
  const std::vector<char> needed = schedule::needed_nodes(g);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (!forward[i] || (n.op_name() != "silu" && n.op_name() != "mul")) continue;
    if (n.type.shape != Shape{6, 12}) continue;
    for (size_t j = 0; j < g.size(); ++j) {
      if (needed[j] && !forward[j]) {
        EXPECT_FALSE(reads(g.node(static_cast<NodeId>(j)), static_cast<NodeId>(i)))
            << "backward node " << g.node(static_cast<NodeId>(j)).op_name() << " reads forward "
            << n.op_name();
      }
    }
  }
  // The same step: loss and updated parameters equal the graph's without copies.
  auto rng = testing::rng_for("rematerialize/swiglu");
  const Array x = testing::random_array(rng, {{6, 8}, DType::f32}, -1.0, 1.0);
  const testing::StepResult want = testing::sgd_step(lowered, x), got = testing::sgd_step(g, x);
  EXPECT_EQ(got.outputs.at("loss").data, want.outputs.at("loss").data);
  for (const char* p : {"wg", "wu", "wd"}) {
    EXPECT_EQ(got.persistent.at(p).data, want.persistent.at(p).data) << p;
  }
}

// relu((x − mean(x))·s) read by the weight gradient: the backward pass reads the ReLU (its
// mask and the weight gradient) and x − mean(x) (the scale's gradient), not the product, which
// is recomputed as a link of the ReLU's copy; with the mean (a small statistic the backward pass
// does not read) kept for the copies, x − mean(x) is recomputed too.
TEST(Rematerialize, ChainsThroughValuesTheBackwardDoesNotReadWithSmallStatisticsKept) {
  auto step = [] {
    auto g = std::make_unique<Graph>();
    Tensor x = g->input("x", {64, 32});
    Tensor s = g->parameter("s", {32}, Init::normal(1.0, 0.2, 4));
    Tensor w = g->parameter("w", {16, 32}, Init::normal(0.0, 0.3, 5));
    Tensor r = relu((x - mean(x, {0}, true)) * s);
    Tensor y = matmul(r, w, false, true);
    Tensor loss = mean(y * y);
    g->output("loss", loss);
    add_training_step(loss, Optimizer::sgd({.lr = 0.1}));
    return g;
  };
  const auto g = step();
  const Graph lowered = schedule::lower_for_gpu(*g);
  const std::optional<schedule::Rematerialized> result =
      schedule::rematerialize(lowered, {.min_elements = 1});
  ASSERT_TRUE(result);
  std::vector<std::string> copied;
  for (size_t i = 0; i < result->graph.size(); ++i) {
    if (result->copies[i]) copied.emplace_back(result->graph.node(static_cast<NodeId>(i)).op_name());
  }
  std::sort(copied.begin(), copied.end());
  EXPECT_EQ(copied, (std::vector<std::string>{"mul", "relu", "sub"}));

  // Without the statistic kept, x − mean(x) (which the scale's gradient reads) stays stored
  // and only the product and the ReLU are recomputed from it.
  const std::optional<schedule::Rematerialized> without_small =
      schedule::rematerialize(lowered, {.min_elements = 1, .small_ratio = 1 << 20});
  ASSERT_TRUE(without_small);
  copied.clear();
  for (size_t i = 0; i < without_small->graph.size(); ++i) {
    if (without_small->copies[i]) {
      copied.emplace_back(without_small->graph.node(static_cast<NodeId>(i)).op_name());
    }
  }
  std::sort(copied.begin(), copied.end());
  EXPECT_EQ(copied, (std::vector<std::string>{"mul", "relu"}));

  // The same step with the copies.
  auto rng = testing::rng_for("rematerialize/chain");
  const Array x = testing::random_array(rng, {{64, 32}, DType::f32}, -1.0, 1.0);
  const testing::StepResult want = testing::sgd_step(lowered, x);
  const testing::StepResult got = testing::sgd_step(result->graph, x);
  EXPECT_EQ(got.outputs.at("loss").data, want.outputs.at("loss").data);
  for (const char* p : {"s", "w"}) {
    EXPECT_EQ(got.persistent.at(p).data, want.persistent.at(p).data) << p;
  }
}

TEST(Rematerialize, SmallValuesAndGraphsWithoutBackwardStayAsTheyAre) {
  SwiGlu m;
  const Graph lowered = schedule::lower_for_gpu(m.g);
  EXPECT_FALSE(schedule::rematerialize(lowered));  // 72 elements < the default

  Graph inference;
  Tensor x = inference.input("x", {1024, 1024});
  inference.output("y", silu(x) * x);
  EXPECT_FALSE(schedule::rematerialize(schedule::lower_for_gpu(inference), {.min_elements = 1}));
}

// A training step planned without a device.
CausalLm training_step(int64_t layers, int64_t batch, int64_t sequence) {
  CausalLmOptions o;
  o.batch = batch;
  o.sequence = sequence;
  o.with_loss = true;
  TransformerSpec spec = smollm2_135m();  // SmolLM2-135M's widths, a small vocabulary
  spec.layers = layers;
  spec.vocab = 512;
  CausalLm lm = build_causal_lm(llama_config(spec), o);
  add_training_step(lm.loss, Optimizer::adamw());
  return lm;
}

// The step planned with recomputation (p) and without (q).
std::pair<plan::StepPlan, plan::StepPlan> plans_of(const Graph& g) {
  plan::PlanOptions with, without;
  without.rematerialize = false;
  return {plan::make_step_plan(g, with), plan::make_step_plan(g, without)};
}

// Four layers at 8 × 512 tokens: the arena shrinks with recomputation (945 -> 774 MiB), and no
// backward kernel launches before the loss's.
TEST(Rematerialize, CausalLmStepPlansLessMemoryAndKeepsBackwardAfterTheLoss) {
  CausalLm lm = training_step(4, 8, 512);
  const auto [p, q] = plans_of(*lm.graph);
  EXPECT_LT(p.arena_bytes, q.arena_bytes * 0.85);
  // Every launch computing only backward values comes after the launch of the loss (a launch
  // writing only scratch, a count or a pack, may run a window or two before the group it serves:
  // plan/launch_levels.h).
  const std::vector<char> forward = schedule::forward_nodes(p.graph);
  NodeId loss = -1;
  for (const auto& [name, id] : p.graph.outputs()) {
    if (name == "loss") loss = id;
  }
  int loss_launch = -1;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const auto& nodes = p.launches[i].nodes;
    if (std::find(nodes.begin(), nodes.end(), loss) != nodes.end()) loss_launch = static_cast<int>(i);
  }
  ASSERT_GE(loss_launch, 0);
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const auto& nodes = p.launches[i].nodes;
    const bool backward_only = std::none_of(nodes.begin(), nodes.end(),
                                            [&](NodeId v) { return forward[v] != 0; });
    bool writes_a_value = false;
    for (size_t k = 0; k < p.launches[i].buffers.size(); ++k) {
      const int b = p.launches[i].buffers[k];
      writes_a_value = writes_a_value || (p.launches[i].kernel.bindings[k].written && b >= 0 &&
                                          p.buffers[static_cast<size_t>(b)].node >= 0);
    }
    if (backward_only && writes_a_value)
      EXPECT_GT(static_cast<int>(i), loss_launch) << p.launches[i].kernel.name;
  }
}

// Two layers at 2 × 256: the planner keeps copies only where they make the arena smaller, in
// either order of the gradient kernels; where they do not, it keeps the plan without them.
TEST(Rematerialize, ThePlannerKeepsCopiesOnlyWhereTheyPay) {
  CausalLm lm = training_step(2, 2, 256);
  for (bool eager : {false, true}) {
    plan::PlanOptions with, without;
    with.eager_gradients = without.eager_gradients = eager;
    without.rematerialize = false;
    const plan::StepPlan p = plan::make_step_plan(*lm.graph, with);
    const plan::StepPlan q = plan::make_step_plan(*lm.graph, without);
    EXPECT_LE(p.arena_bytes, q.arena_bytes) << "eager gradients " << eager;
    if (p.arena_bytes == q.arena_bytes) {
      EXPECT_EQ(p.launches.size(), q.launches.size()) << "eager gradients " << eager;
    }
  }
}

}  // namespace
}  // namespace mn
