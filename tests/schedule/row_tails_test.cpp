// Pointwise work over a reduction's rows done by the reduction's kernel (schedule/row_tails.h):
// the values are the unfused kernels' bit for bit and the reference's, with a launch fewer per
// pair; reductions over other axes, pointwise kernels of another shape and work of the other
// pass keep their own launches; a causal LM's norms take their tails.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/fused_reduce.h"
#include "plan/step_plan.h"
#include "schedule/fused_and_unfused.h"
#include "schedule/tiny_causal_lm.h"
#include "support/elementwise_error.h"
#include "support/expect_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// Launch names carrying a tail, and the plan's launch count.
std::pair<std::vector<std::string>, size_t> tails_of(const Graph& g) {
  const plan::StepPlan p = plan::make_step_plan(g, plan::PlanOptions{});
  std::vector<std::string> tails;
  for (const plan::PlannedLaunch& l : p.launches) {
    if (l.kernel.name.find("+tail[") != std::string::npos) tails.push_back(l.kernel.name);
  }
  return {tails, p.launches.size()};
}

TEST(RowTailsGpu, NormsAndRowSumsMatchTheUnfusedKernels) {
  auto rng = testing::rng_for("row-tails");
  Graph g;
  reference::Feeds feeds;
  Tensor x = g.input("x", {3, 5, 40});
  Tensor gamma = g.input("gamma", {40});
  Tensor d = g.input("d", {3, 5, 40});
  Tensor t = g.input("t", {3, 5, 40});
  for (const Tensor& v : {x, gamma, d, t})
    feeds[g.node(v.id()).name] = testing::random_array(rng, v.type());
  // RMSNorm's decomposition (the e-graph finds rms_norm in it; its training form stays
  // decomposed): the statistics' epilogue and the normalized row.
  Tensor rstd = rsqrt(sum(x * x, {-1}, true) * 0.025 + 1e-5);
  g.output("rms", x * rstd * gamma);
  // A softmax backward's row sum and dS.
  Tensor p = softmax(x);
  g.output("ds", p * (d - sum(d * p, {-1}, true)));
  // A centred row, scaled (a division by a literal may compile to a product by its reciprocal
  // in one kernel and not in another: the mean is a product here).
  g.output("centred", (d - sum(d, {-1}, true) * 0.025) * t);
  // A row maximum subtracted.
  g.output("shifted", exp(x - max(x * 2.0, {-1}, true)));
  // Not tails: a sum over columns, and a pointwise kernel over the rows' values alone.
  Tensor cols = sum(d * d, {1}, true);
  g.output("cols", d / (cols + 1.0));
  g.output("row_values", sum(x, {-1}, true) * 3.0);

  const auto [fused, fused_dispatches, unfused, unfused_dispatches] =
      testing::run_fused_and_unfused(g, feeds);
  const auto ref = reference::evaluate(g, feeds);
  for (const auto& [name, expected] : ref) {
    EXPECT_EQ(fused.at(name).data, unfused.at(name).data) << name;
    EXPECT_TRUE(testing::elementwise_near(fused.at(name), expected, 1e-5)) << name;
  }
  const auto [tails, launches] = tails_of(g);
  EXPECT_EQ(tails.size(), 4u);
  for (const std::string& name : tails) {
    EXPECT_TRUE(name.starts_with("sum") || name.starts_with("mean") || name.starts_with("max"))
        << name;
  }
  EXPECT_EQ(fused_dispatches, launches);
}

// The rows' statistics of the forward pass read by the backward pass stay apart from it, and
// a causal LM's norms forward and backward take tails.
TEST(RowTails, ACausalLmStepFusesItsNormsWithinEachPass) {
  const CausalLm m = testing::tiny_causal_lm_step(2);
  plan::PlanOptions po;
  const plan::StepPlan p = plan::make_step_plan(*m.graph, po);
  const std::vector<char> forward = schedule::forward_nodes(p.graph);
  int tails = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    if (l.kernel.name.find("+tail[") == std::string::npos) continue;
    ++tails;
    const char pass = forward[static_cast<size_t>(l.nodes.front())];
    for (NodeId v : l.nodes) EXPECT_EQ(forward[static_cast<size_t>(v)], pass) << l.kernel.name;
  }
  // Two norms a layer and the final one, forward and backward.
  EXPECT_GE(tails, 2 * (2 * 2 + 1));
}

TEST(RowTails, ReductionsOverOtherAxesRefuseATail) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  const Tensor s = sum(x, {0}, true);
  const Node& node = g.node(s.id());
  const std::vector<TensorType> in{x.type()};
  EXPECT_FALSE(codegen::reduce_takes_row_tail(node, in, codegen::DeviceTraits{}));
  codegen::ReduceFusion f;
  f.tail = true;
  expect_error<Error>(
      [&] {
        codegen::lower_reduce_fused(codegen::LowerContext{node, in, codegen::DeviceTraits{}}, &f);
      },
      {"takes no row tail", "innermost axis"});
  const Tensor rows = sum(x, {1}, true);
  EXPECT_TRUE(codegen::reduce_takes_row_tail(g.node(rows.id()), in, codegen::DeviceTraits{}));
}

}  // namespace
}  // namespace mn
