// Flow launches (plan/flow_launches.h, codegen/flow_kernel.h): kernels of programs that do not
// train order themselves through counters; written buffers are declared coherent and read-only
// weights are not; a kernel text the wrapper cannot take keeps its barriers; and a session
// computes the same bits with them as with barriers, recording fewer barriers.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "codegen/flow_kernel.h"
#include "plan/step_plan.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

constexpr int64_t kWidth = 64;

// A vector through three layers (product, ReLU) with a residual add: windows of dependent
// launches, some reading values two launches back.
Graph layers(bool train) {
  Graph g;
  Tensor x = g.input("x", {2, kWidth});
  Tensor h = x;
  for (int i = 0; i < 3; ++i) {
    const Tensor w = g.parameter("w" + std::to_string(i), {kWidth, kWidth}, Init::zeros());
    h = relu(matmul(h, w, false, true)) + h;
  }
  if (!train) {
    g.output("y", h);
    return g;
  }
  const Tensor loss = mean(h * h);
  g.output("loss", loss);
  add_training_step(loss, Optimizer::sgd({.lr = 0.01}));
  return g;
}

plan::PlanOptions flowing(bool on) {
  plan::PlanOptions po;
  po.device.flow_launches = on;
  po.device.cache_prefetch = true;  // left out of flow programs
  return po;
}

// Whether binding b of `glsl` is declared coherent.
bool coherent_binding(const std::string& glsl, size_t b) {
  const std::regex decl("layout\\(std430, set = 0, binding = " + std::to_string(b) +
                        "\\)([^\\n]*)buffer");
  std::smatch m;
  if (!std::regex_search(glsl, m, decl)) ADD_FAILURE() << "binding " << b << " not declared";
  return m[1].str().find("coherent") != std::string::npos;
}

TEST(FlowLaunches, InferenceKernelsTakeTheFlowForm) {
  const plan::StepPlan p = plan::make_step_plan(layers(false), flowing(true));
  ASSERT_FALSE(p.launches.empty());
  std::set<int> written;
  for (const plan::PlannedLaunch& l : p.launches) {
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (l.kernel.bindings[k].written) written.insert(l.buffers[k]);
    }
  }
  int inputs_read = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    EXPECT_TRUE(l.kernel.flow) << l.kernel.name;
    EXPECT_NE(l.kernel.name, "cache_prefetch");
    EXPECT_NE(l.kernel.glsl.find("void mn_flow_kernel()"), std::string::npos);
    // Weights and the input (uploaded before the step's first barrier) keep their
    // declarations; what a launch writes and what shares memory with it are coherent.
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const plan::PlannedBuffer& b = p.buffers[static_cast<size_t>(l.buffers[k])];
      const bool stays = b.persistent && !written.count(l.buffers[k]);
      inputs_read += stays && p.graph.node(b.node).op_name() == "input";
      EXPECT_EQ(coherent_binding(l.kernel.glsl, k), !stays) << l.kernel.name << " binding " << k;
    }
  }
  EXPECT_GT(inputs_read, 0);
  for (const plan::PlannedLaunch& l :
       plan::make_step_plan(layers(false), flowing(false)).launches) {
    EXPECT_FALSE(l.kernel.flow);
  }
}

TEST(FlowLaunches, TrainingStepsKeepTheirBarriers) {
  for (const plan::PlannedLaunch& l : plan::make_step_plan(layers(true), flowing(true)).launches) {
    EXPECT_FALSE(l.kernel.flow) << l.kernel.name;
  }
}

TEST(FlowLaunches, TextsTheWrapperCannotTakeAreLeftAlone) {
  const std::string one =
      "#version 450\nlayout(std430, set = 0, binding = 0) readonly buffer B0 { float a[]; };\n"
      "layout(std430, set = 0, binding = 1) buffer B1 { float b[]; };\n"
      "void main() { b[0] = a[0]; }\n";
  const auto flow = codegen::flow_kernel(one, 2, {0, 1});
  ASSERT_TRUE(flow.has_value());
  EXPECT_FALSE(coherent_binding(*flow, 0));
  EXPECT_TRUE(coherent_binding(*flow, 1));
  EXPECT_NE(flow->find("binding = 2) readonly buffer MnFlowRecord"), std::string::npos);
  EXPECT_NE(flow->find("binding = 3) coherent buffer MnFlowCounters"), std::string::npos);
  EXPECT_EQ(flow->find("void main() { b[0]"), std::string::npos);
  // Two mains, none, or a binding past the kernel's count (the recording would not bind it).
  EXPECT_FALSE(codegen::flow_kernel(one + "void main() {}\n", 2, {0, 1}).has_value());
  EXPECT_FALSE(codegen::flow_kernel("#version 450\nvoid helper() {}\n", 0, {}).has_value());
  EXPECT_FALSE(codegen::flow_kernel(one, 1, {0}).has_value());
}

TEST(FlowLaunches, SessionsComputeTheSameBits) {
  const Graph g = layers(false);
  std::mt19937_64 rng = testing::rng_for("flow_launches");
  std::map<std::string, Array> feeds;
  feeds["x"] = testing::random_array(rng, g.node(g.inputs().front()).type);
  for (NodeId id : g.parameters()) {
    feeds[g.node(id).name] = testing::random_array(rng, g.node(id).type, -0.3, 0.3);
  }
  std::vector<double> results[2];
  size_t barriers[2] = {0, 0}, dispatches[2] = {0, 0};
  for (int on : {0, 1}) {
    testing::ScopedEnv env("MN_FLOW", on ? "1" : "0");
    testing::ScopedEnv no_prefetch("MN_CACHE_PREFETCH", "0");
    auto s = build_session(g);
    barriers[on] = s->memory().barriers;
    dispatches[on] = s->memory().dispatches;
    for (const auto& [name, value] : feeds) s->set(name, value);
    for (int step = 0; step < 3; ++step) s->step();
    results[on] = s->get("y").data;
  }
  EXPECT_EQ(dispatches[0], dispatches[1]);
  EXPECT_GT(barriers[0], 0u);
  EXPECT_LT(barriers[1], barriers[0]) << "the input's upload and the output's readback only";
  EXPECT_EQ(results[0], results[1]);
}

}  // namespace
}  // namespace mn
