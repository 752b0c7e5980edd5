// Optimizer updates spread over the backward pass (schedule::FusionOptions::spread_updates):
// without it every update runs after the step's last backward kernel; with it the updates
// ready together launch as one, where their gradients become ready, each after the kernels
// that write what it reads; the same updates either way, and a session computes the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "plan/barrier_windows.h"
#include "plan/launch_levels.h"
#include "plan/step_plan.h"
#include "plan/synthetic_launches.h"
#include "schedule/fusion.h"
#include "support/scoped_env.h"
#include "tiny_causal_lm.h"

namespace mn {
namespace {

struct Updates {
  std::vector<size_t> at;   // launch indices of the updates, in order
  std::set<NodeId> values;  // the values they store
  size_t launches = 0;
};

// The launches storing values the step assigns to its parameters and states.
Updates updates_of(const plan::StepPlan& p) {
  std::set<NodeId> assigned;
  for (const auto& [target, value] : p.graph.assignments()) assigned.insert(value);
  Updates u;
  u.launches = p.launches.size();
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const plan::PlannedLaunch& l = p.launches[i];
    if (l.group < 0) continue;
    bool stores_update = false;
    for (NodeId o : p.groups[static_cast<size_t>(l.group)].outputs) {
      if (assigned.count(o)) {
        stores_update = true;
        u.values.insert(o);
      }
    }
    if (stores_update) u.at.push_back(i);
  }
  return u;
}

// The step's gradient kernels in the graph's order (PlanOptions::eager_gradients off: each
// layer's weight gradients in its backward pass), so that the updates have somewhere to go
// before the end.
plan::StepPlan plan_step(const Graph& g, bool spread, DType precision = DType::f32) {
  plan::PlanOptions po;
  po.device.spread_updates = spread;
  po.eager_gradients = false;
  po.precision = precision;
  if (precision != DType::f32) po.device.storage_16bit = true;
  return plan::make_step_plan(g, po);
}

TEST(SpreadUpdates, UpdatesLaunchWhereTheirGradientsAreReady) {
  const CausalLm m = testing::tiny_causal_lm_step(2);
  for (DType precision : {DType::f32, DType::bf16}) {
    const plan::StepPlan end = plan_step(*m.graph, false, precision);
    const plan::StepPlan spread = plan_step(*m.graph, true, precision);
    const Updates e = updates_of(end), s = updates_of(spread);
    // The same values updated either way.
    EXPECT_EQ(e.values, s.values);
    ASSERT_FALSE(e.at.empty());
    ASSERT_FALSE(s.at.empty());
    // At the end: nothing but updates after the first of them.
    for (size_t i = e.at.front(); i < e.launches; ++i) {
      EXPECT_NE(std::find(e.at.begin(), e.at.end(), i), e.at.end())
          << dtype_name(precision) << ": " << end.launches[i].kernel.name
          << " after the first update";
    }
    // Spread: the first update runs before the backward pass's middle, and at least half of
    // the update launches have backward kernels after them.
    EXPECT_LT(s.at.front(), s.launches / 2 + s.launches / 4) << dtype_name(precision);
    size_t followed = 0;
    for (size_t k = 0; k + 1 < s.at.size(); ++k) followed += s.at[k + 1] > s.at[k] + 1 ? 1 : 0;
    EXPECT_GE(followed * 2, s.at.size()) << dtype_name(precision);
    // In windows that open anyway (plan::defer_tail_launches): the end's windows, less the
    // updates' own at the end.
    EXPECT_LE(plan::barrier_windows(spread.launches), plan::barrier_windows(end.launches))
        << dtype_name(precision);
  }
}

// An update ready right after its gradient's kernel waits for the next window that opens
// anyway, and never passes a launch touching what it touches.
TEST(SpreadUpdates, DeferredToTheNextWindow) {
  testing::Program p;
  const int grad = p.add("gradient", {0});
  schedule::KernelGroup update;
  update.tail = true;
  std::vector<schedule::KernelGroup> groups(3);
  groups[1] = update;
  p.add("update", {grad}, 1, codegen::ArgRef::Kind::output);  // launch 1 reads the gradient
  const int x = p.add("beside", {0});                         // independent of both
  p.add("next", {x});                                         // opens a window
  for (size_t i = 0; i < p.launches.size(); ++i) p.launches[i].group = i == 1 ? 1 : 0;
  std::vector<plan::PlannedLaunch> launches = p.launches;
  EXPECT_EQ(plan::defer_tail_launches(launches, groups), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(plan::barrier_windows(launches), 2u);  // {gradient, beside} {update, next}
  EXPECT_EQ(plan::barrier_windows(p.launches), 3u);
  // A launch reading what the update writes keeps its place after it.
  p.launches[2].buffers[0] = 1;
  launches = p.launches;
  EXPECT_EQ(plan::defer_tail_launches(launches, groups), (std::vector<int>{0, 1, 2, 3}));
}

// Each update launch comes after every launch storing a value it reads.
TEST(SpreadUpdates, EachUpdateFollowsTheKernelsItReads) {
  const CausalLm m = testing::tiny_causal_lm_step(2);
  const plan::StepPlan p = plan_step(*m.graph, true);
  std::map<NodeId, size_t> stored_by;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const plan::PlannedLaunch& l = p.launches[i];
    if (l.group < 0) continue;
    for (NodeId o : p.groups[static_cast<size_t>(l.group)].outputs) stored_by.emplace(o, i);
  }
  for (size_t i : updates_of(p).at) {
    const plan::PlannedLaunch& l = p.launches[i];
    for (NodeId in : p.groups[static_cast<size_t>(l.group)].inputs) {
      const auto it = stored_by.find(in);
      if (it != stored_by.end()) EXPECT_LT(it->second, i) << l.kernel.name << " reads %" << in;
    }
  }
}

// Three AdamW steps with the updates at the end and spread: the same loss and weights, bit for
// bit (the same kernels compute the same values; only their order changes).
TEST(SpreadUpdates, SessionsComputeTheSameBits) {
  auto train = [](bool spread) {
    testing::ScopedEnv env("MN_SPREAD_UPDATES", spread ? "1" : "0");
    const CausalLm m = testing::tiny_causal_lm_step(2);
    auto s = build_session(*m.graph);
    std::mt19937 rng(11);
    std::vector<int32_t> tokens(32);
    std::vector<double> losses;
    for (int step = 1; step <= 3; ++step) {
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 96);
      s->set("input_ids", tokens);
      s->set("labels", tokens);
      for (const auto& [n, v] : step_scalars(Optimizer::adamw(), 1e-3, step)) s->set_scalar(n, v);
      s->step();
      losses.push_back(s->get("loss").data[0]);
    }
    return std::tuple{losses, s->get("model.layers.0.self_attn.q_proj.weight").data,
                      s->get("model.layers.1.mlp.down_proj.weight").data, s->memory().dispatches};
  };
  const auto [losses, q, down, dispatches] = train(true);
  const auto [end_losses, end_q, end_down, end_dispatches] = train(false);
  EXPECT_GT(dispatches, end_dispatches) << "the updates were not spread";
  EXPECT_EQ(losses, end_losses);
  EXPECT_EQ(q, end_q);
  EXPECT_EQ(down, end_down);
}

}  // namespace
}  // namespace mn
