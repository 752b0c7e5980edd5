// Launches as early as their operands allow (plan/launch_levels.h): within a lowering by
// dependency level (a product's two operands measured side by side, then packed side by side),
// and launches writing only their own scratch up to two barrier windows earlier, never past a
// launch they depend on or that depends on them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "plan/barrier_windows.h"
#include "plan/launch_levels.h"
#include "plan/step_plan.h"
#include "plan/synthetic_launches.h"

namespace mn {
namespace {

using codegen::ArgRef;
using testing::Program;

plan::PlanOptions h200() {
  plan::PlanOptions po;
  po.device = codegen::testing::h200_traits();
  return po;
}

// A product of two f32 operands measures both, packs both, then multiplies: three windows.
TEST(LaunchLevels, BothOperandsMeasuredAndPackedSideBySide) {
  Graph g;
  Tensor x = g.input("x", {512, 1024});
  Tensor w = g.input("w", {1024, 1024});
  g.output("y", matmul(x, w));
  const plan::StepPlan p = plan::make_step_plan(g, h200());
  std::vector<std::string> names;
  for (const plan::PlannedLaunch& l : p.launches) names.push_back(l.kernel.name);
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names[0], "matmul_coop_absmax");
  EXPECT_EQ(names[1], "matmul_coop_absmax");
  EXPECT_EQ(names[2], "matmul_coop_pack");
  EXPECT_EQ(names[3], "matmul_coop_pack");
  EXPECT_EQ(plan::barrier_windows(p.launches), 3u);
}

// Gate and up of f32 operands: up's weight is measured and packed beside the gate's (its
// activation's pack is the gate's, plan/shared_launches.h), so the step has as many windows as
// its dependency chain is deep: measures, packs, gate, up with the gate's SwiGLU.
TEST(LaunchLevels, TheSecondWeightPackedBesideTheFirst) {
  Graph g;
  Tensor x = g.input("x", {512, 1024});
  Tensor wg = g.input("wg", {1024, 1024});
  Tensor wu = g.input("wu", {1024, 1024});
  g.output("y", silu(matmul(x, wg)) * matmul(x, wu));
  const plan::StepPlan p = plan::make_step_plan(g, h200());
  EXPECT_EQ(plan::barrier_windows(p.launches), plan::dependency_depth(p.launches));
  EXPECT_LE(plan::barrier_windows(p.launches), 4u);
}

codegen::KernelLaunch kernel(const std::string& glsl, std::vector<codegen::KernelBinding> b) {
  codegen::KernelLaunch k;
  k.name = glsl;
  k.glsl = glsl;
  k.bindings = std::move(b);
  return k;
}

TEST(LaunchLevels, DependentLaunchesKeepTheirOrder) {
  codegen::Lowering l;
  const codegen::KernelBinding in{ArgRef::input(0), false};
  l.launches.push_back(kernel("a", {in, {ArgRef::scratch(0), true}}));
  l.launches.push_back(kernel("b", {{ArgRef::scratch(0), false}, {ArgRef::scratch(1), true}}));
  l.launches.push_back(kernel("c", {in, {ArgRef::scratch(2), true}}));
  l.launches.push_back(kernel("d", {{ArgRef::scratch(1), false}, {ArgRef::output(0), false}}));
  l.launches.push_back(kernel("e", {{ArgRef::output(0), false}, {ArgRef::counters(0), false}}));
  plan::order_by_dependency_level(l);
  std::string order;
  for (const auto& k : l.launches) order += k.name;
  // Levels: a 0, b 1, c 0, d 2, e 3 (it reads the output d writes).
  EXPECT_EQ(order, "acbde");
}

std::string order_of(const Program& p) {
  std::string s;
  for (const plan::PlannedLaunch& l : p.launches) s += l.kernel.name;
  return s;
}

// Windows a | b | c | d (each reads the value before it); a pack of the input written last.
Program chain(int pack_reads) {
  Program p;
  int v = p.add("a", {0}, p.value(), ArgRef::Kind::output);
  for (const char* name : {"b", "c", "d"}) v = p.add(name, {v}, p.value(), ArgRef::Kind::output);
  p.add("P", {pack_reads});
  return p;
}

TEST(LaunchLevels, ScratchLaunchesJoinUpToTwoWindowsBefore) {
  Program p = chain(0);  // the pack reads the input: free to go anywhere
  EXPECT_EQ(plan::hoist_scratch_launches(p.launches, p.buffers), (std::vector<int>{0, 1, 3, 4, 2}));
  EXPECT_EQ(order_of(p), "abPcd");
  EXPECT_EQ(plan::barrier_windows(p.launches), 4u);
}

TEST(LaunchLevels, NeverBeforeWhatTheyRead) {
  Program p = chain(4);  // the pack reads c's value (buffer 4): it joins d's window, no earlier
  EXPECT_EQ(plan::hoist_scratch_launches(p.launches, p.buffers), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(order_of(p), "abcdP");
}

TEST(LaunchLevels, NeverBeforeWhatReadsThem) {
  Program p;
  const int v = p.add("a", {0}, p.value(), ArgRef::Kind::output);
  const int s = p.scratch();
  p.add("r", {v, s}, p.value(), ArgRef::Kind::output);  // reads s before the pack writes it
  p.add("P", {0}, s);
  EXPECT_EQ(plan::hoist_scratch_launches(p.launches, p.buffers), (std::vector<int>{0, 1, 2}));
}

TEST(LaunchLevels, OnlyLaunchesWritingTheirOwnScratchMove) {
  Program p;
  const int v = p.add("a", {0}, p.value(), ArgRef::Kind::output);
  p.add("b", {v}, p.value(), ArgRef::Kind::output);
  p.add("n", {0}, p.value(), ArgRef::Kind::output);  // a node's value: stays in b's window
  p.add("c", {0}, -1, ArgRef::Kind::counters);       // counters: stay
  EXPECT_EQ(plan::hoist_scratch_launches(p.launches, p.buffers), (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace mn
