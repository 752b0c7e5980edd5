// Reductions computing their operands in their own loads (schedule/reduction_operands.h): which
// DAGs are copied, that the step computes the same values with the copies, that fusion then
// stores none of the intermediate values, and that the planned arena shrinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>

#include "codegen/fused_reduce.h"
#include "plan/step_plan.h"
#include "schedule/fusion.h"
#include "schedule/gpu_lowering.h"
#include "schedule/reduction_operands.h"
#include "schedule/batch_norm_step.h"
#include "schedule/sgd_step.h"
#include "support/random_fill.h"

namespace mn {
namespace {

using testing::BatchNormStep;

bool is_reduction_with_prologue(const Graph& g, NodeId r) {
  const Node& n = g.node(r);
  return n.inputs.size() == 1 &&
         codegen::reduce_accepts_fusion(n, std::vector<TensorType>{g.node(n.inputs[0]).type});
}

std::vector<std::vector<NodeId>> consumers_of(const Graph& g) {
  const std::vector<char> needed = schedule::needed_nodes(g);
  std::vector<std::vector<NodeId>> c(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (!needed[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) c[in].push_back(static_cast<NodeId>(i));
  }
  return c;
}

TEST(ReductionOperands, BatchNormBackwardSumsReadPrivateCopiesOfTheirOperands) {
  BatchNormStep m;
  const Graph lowered = schedule::lower_for_gpu(m.g);
  const std::optional<Graph> result = schedule::private_reduction_operands(lowered);
  ASSERT_TRUE(result);
  const Graph& g = *result;
  EXPECT_GT(g.size(), lowered.size());

  // Every large reduction over a fusable pointwise value is its value's only reader, and the
  // DAG behind it stays within its pass (a backward sum copies no forward value).
  const auto consumers = consumers_of(g);
  const std::vector<char> needed = schedule::needed_nodes(g);
  const std::vector<char> forward = schedule::forward_nodes(g);
  int private_sums = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const auto r = static_cast<NodeId>(i);
    if (!needed[i] || !is_reduction_with_prologue(g, r)) continue;
    const NodeId p = g.node(r).inputs[0];
    if (g.node(p).type.numel() < (1 << 16) || !schedule::fusable_node(g, p)) continue;
    EXPECT_EQ(consumers[p].size(), 1u) << "the operand of %" << r << " is shared";
    ++private_sums;
    std::vector<NodeId> stack{p};
    std::set<NodeId> seen;
    while (!stack.empty()) {
      const NodeId v = stack.back();
      stack.pop_back();
      if (!seen.insert(v).second || !schedule::fusable_node(g, v)) continue;
      if (consumers[v].size() != 1) continue;  // shared: not a copy of this DAG
      EXPECT_EQ(forward[v], forward[r]) << "%" << v << " copied across passes";
      for (NodeId in : g.node(v).inputs) stack.push_back(in);
    }
  }
  EXPECT_GE(private_sums, 3);  // Σg, Σg·x̂ and Σg·γ·x̂ at least

  // The same step: loss, updated parameters and running statistics bit for bit.
  auto rng = testing::rng_for("reduction_operands/batch_norm");
  const int64_t n = BatchNormStep::kN, c = BatchNormStep::kC, hw = BatchNormStep::kHW;
  const Array x = testing::random_array(rng, {{n, c, hw, hw}, DType::f32}, -1.0, 1.0);
  const testing::StepResult want = testing::sgd_step(lowered, x), got = testing::sgd_step(g, x);
  EXPECT_EQ(got.outputs.at("loss").data, want.outputs.at("loss").data);
  for (const char* p : {"w", "gamma", "beta", "running_mean", "running_var"}) {
    EXPECT_EQ(got.persistent.at(p).data, want.persistent.at(p).data) << p;
  }
}

// With the copies, fusion stores no full-size value that only reductions and the input
// gradient's kernel read: the backward's fused kernels store the input gradient alone (besides
// the relu, which the optimized step computes for the backward pass's mask only), and the
// planned arena is smaller. Without recomputation, which would add a copy of the relu.
TEST(ReductionOperands, FusionStoresNoIntermediateOfTheBatchNormBackward) {
  BatchNormStep m;
  plan::PlanOptions with, without;
  with.rematerialize = without.rematerialize = false;
  without.reduction_operands = false;
  const plan::StepPlan p = plan::make_step_plan(m.g, with);
  const plan::StepPlan q = plan::make_step_plan(m.g, without);
  auto stored_backward_activations = [](const plan::StepPlan& s) {
    const std::vector<char> forward = schedule::forward_nodes(s.graph);
    int count = 0;
    for (const schedule::KernelGroup& k : s.groups) {
      if (k.kind == schedule::KernelGroup::Kind::single) continue;
      for (NodeId o : k.outputs) {
        const Node& n = s.graph.node(o);
        count += !forward[o] && n.op_name() != "relu" &&
                 n.type.shape == Shape{BatchNormStep::kN, BatchNormStep::kC, BatchNormStep::kHW,
                                       BatchNormStep::kHW};
      }
    }
    return count;
  };
  EXPECT_LT(stored_backward_activations(p), stored_backward_activations(q));
  EXPECT_LE(stored_backward_activations(p), 1);
  EXPECT_LT(p.arena_bytes, q.arena_bytes);
  EXPECT_LT(p.launches.size(), q.launches.size());
}

TEST(ReductionOperands, UnsharedAndSmallOperandsStayAsTheyAre) {
  // sum(x·x) alone reads x·x: fusion already computes it in the sum's loads.
  Graph alone;
  Tensor x = alone.input("x", {512, 512});
  alone.output("s", sum(x * x));
  EXPECT_FALSE(schedule::private_reduction_operands(schedule::lower_for_gpu(alone)));

  // Shared, but small.
  Graph small;
  Tensor y = small.input("y", {16, 16});
  Tensor sq = y * y;
  small.output("s", sum(sq));
  small.output("z", exp(sq));
  EXPECT_FALSE(schedule::private_reduction_operands(schedule::lower_for_gpu(small)));

  // Shared and large: copied, and the outputs are those of the graph without copies.
  Graph large;
  Tensor u = large.input("u", {512, 512});
  Tensor d = u - mean(u, {1}, true);
  large.output("v", sum(d * d, {1}, true));
  large.output("n", d * 2.0);
  const Graph lowered = schedule::lower_for_gpu(large);
  const std::optional<Graph> copied = schedule::private_reduction_operands(lowered);
  ASSERT_TRUE(copied);
  auto rng = testing::rng_for("reduction_operands/centered");
  reference::Feeds inputs{{"u", testing::random_array(rng, {{512, 512}, DType::f32}, -1.0, 1.0)}};
  reference::Feeds unused_a, unused_b;
  const auto want = reference::run_step(lowered, inputs, unused_a);
  const auto got = reference::run_step(*copied, inputs, unused_b);
  EXPECT_EQ(got.at("v").data, want.at("v").data);
  EXPECT_EQ(got.at("n").data, want.at("n").data);
}

}  // namespace
}  // namespace mn
