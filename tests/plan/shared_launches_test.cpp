// Repeated launches run once (plan/shared_launches.h): planned for an H200, a loop's products
// pack their common weight once; launches are never shared across a write of what they read,
// nor when they write anything but their own scratch, nor far apart in a training step unless
// what they write is small.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>

#include "codegen/coop_fixture.h"
#include "plan/barrier_windows.h"
#include "plan/shared_launches.h"
#include "plan/step_plan.h"
#include "plan/synthetic_launches.h"

namespace mn {
namespace {

using codegen::ArgRef;
using testing::Program;

plan::PlanOptions h200(bool shared) {
  plan::PlanOptions po;
  po.device = codegen::testing::h200_traits();
  po.device.shared_launches = shared;
  return po;
}

size_t count_named(const plan::StepPlan& p, const std::string& suffix) {
  size_t n = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    const std::string& name = l.kernel.name;
    n += name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  return n;
}

// Three steps of x = relu(x·w) with one weight, on the cooperative kernels: each step packs its
// own x, and w once.
Graph weight_loop() {
  Graph g;
  Tensor x = g.input("x", {512, 1024});
  Tensor w = g.parameter("w", {1024, 1024}, Init::zeros());
  for (int i = 0; i < 3; ++i) x = relu(matmul(x, w));
  g.output("y", x);
  return g;
}

TEST(SharedLaunches, ALoopPacksItsWeightOnce) {
  const Graph g = weight_loop();
  const plan::StepPlan off = plan::make_step_plan(g, h200(false));
  const plan::StepPlan on = plan::make_step_plan(g, h200(true));
  ASSERT_EQ(count_named(off, "_pack"), 6u) << "the loop's products are not packed as expected";
  EXPECT_EQ(count_named(on, "_pack"), 4u);
  EXPECT_EQ(count_named(on, "_absmax"), 4u);
  EXPECT_EQ(on.launches.size(), off.launches.size() - 4);
  EXPECT_LE(plan::barrier_windows(on.launches), plan::barrier_windows(off.launches));
  // Every product reads the one packed weight: its B binding is the first pack's scratch.
  std::set<int> packed_weights;
  int products = 0;
  for (const plan::PlannedLaunch& l : on.launches) {
    if (l.kernel.name.find("matmul_coop") == std::string::npos ||
        l.kernel.name.find("_pack") != std::string::npos ||
        l.kernel.name.find("_absmax") != std::string::npos) {
      continue;
    }
    ++products;
    ASSERT_GE(l.buffers.size(), 2u);
    packed_weights.insert(l.buffers[1]);
    EXPECT_LT(on.buffers[static_cast<size_t>(l.buffers[1])].node, 0) << "B is not a pack";
  }
  EXPECT_EQ(products, 3);
  EXPECT_EQ(packed_weights.size(), 1u);
  // The weight's pack stays live until the last product reads it.
  const int b = *packed_weights.begin();
  int last_reader = -1;
  for (size_t i = 0; i < on.launches.size(); ++i) {
    for (int x : on.launches[i].buffers) {
      if (x == b) last_reader = static_cast<int>(i);
    }
  }
  EXPECT_GE(on.buffers[static_cast<size_t>(b)].last_use, last_reader);
}

// A training step of six f32 layers on tensor cores: each activation and weight is measured
// once, for its forward product and for its gradients' (the measures' partials are small
// enough to keep across the step), however far apart those products are.
TEST(SharedLaunches, ATrainingStepMeasuresEachOperandOnce) {
  Graph g;
  Tensor x = g.input("x", {512, 1024});
  for (int i = 0; i < 6; ++i) {
    x = relu(matmul(x, g.parameter("w" + std::to_string(i), {1024, 1024}, Init::zeros())));
  }
  add_training_step(sum(x * x), Optimizer::sgd({}));
  const plan::StepPlan off = plan::make_step_plan(g, h200(false));
  const plan::StepPlan on = plan::make_step_plan(g, h200(true));
  ASSERT_GT(count_named(off, "_absmax"), count_named(on, "_absmax"));
  std::set<std::string> measured;
  size_t measures = 0;
  for (const plan::PlannedLaunch& l : on.launches) {
    if (!l.kernel.name.ends_with("_absmax")) continue;
    ++measures;
    std::string key = l.kernel.glsl;
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (!l.kernel.bindings[k].written) key += "|" + std::to_string(l.buffers[k]);
    }
    EXPECT_TRUE(measured.insert(key).second) << "a buffer measured twice";
  }
  EXPECT_GT(measures, 6u);
}

TEST(SharedLaunches, RepeatsReadTheFirstOnesScratch) {
  Program p;
  const int s = p.add("pack", {0});
  p.add("use", {s}, 1, ArgRef::Kind::output);
  const int t = p.add("pack", {0});
  p.add("use2", {t});
  const std::vector<int> moved = plan::share_repeated_launches(p.launches, p.buffers, {});
  EXPECT_EQ(moved, (std::vector<int>{0, 1, -1, 2}));
  ASSERT_EQ(p.launches.size(), 3u);
  EXPECT_EQ(p.launches[2].buffers[0], s);
}

TEST(SharedLaunches, NotAcrossAWriteOfWhatTheyRead) {
  Program p;
  p.add("pack", {1});
  p.add("compute", {0}, 1, ArgRef::Kind::output);  // buffer 1 changes
  p.add("pack", {1});
  EXPECT_EQ(plan::share_repeated_launches(p.launches, p.buffers, {}), (std::vector<int>{0, 1, 2}));
}

TEST(SharedLaunches, OnlyLaunchesWritingTheirOwnScratch) {
  Program p;
  p.add("node", {0}, 1, ArgRef::Kind::output);  // writes a node's value
  p.add("node", {0}, 1, ArgRef::Kind::output);
  p.add("count", {0}, -1, ArgRef::Kind::counters);
  p.add("count", {0}, -1, ArgRef::Kind::counters);
  const int shared = p.scratch();  // one scratch written twice
  p.add("twice", {0}, shared);
  p.add("twice", {0}, shared);
  EXPECT_EQ(plan::share_repeated_launches(p.launches, p.buffers, {}),
            (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

// In a training step a repeat far from the first is shared only where it writes little (a
// measure's partial maxima: an activation measured for its forward product and again for its
// weight gradient's); a pack's copy is not kept alive over the step.
TEST(SharedLaunches, TrainingStepsShareLargeScratchOnlyNearby) {
  for (const bool trains : {false, true}) {
    for (const uint64_t bytes : {uint64_t{1} << 10, uint64_t{1} << 20}) {
      Program p;
      p.buffers[static_cast<size_t>(p.add("pack", {0}))].bytes = bytes;
      for (int i = 0; i < 20; ++i) p.add("other" + std::to_string(i), {0});
      p.buffers[static_cast<size_t>(p.add("pack", {0}))].bytes = bytes;
      plan::SharedLaunchOptions o;
      o.trains = trains;
      const std::vector<int> moved = plan::share_repeated_launches(p.launches, p.buffers, o);
      EXPECT_EQ(moved.back() < 0, !trains || bytes <= o.small_scratch_bytes)
          << "trains " << trains << ", " << bytes << " bytes";
    }
  }
}

}  // namespace
}  // namespace mn
