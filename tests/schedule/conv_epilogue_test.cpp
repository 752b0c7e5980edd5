// Pointwise consumers fused into the conv2d forward's store: the grouping (one launch for the
// conv and its epilogue, the conv's own value stored beside it when the backward pass reads
// it), the CNN training step's launch count, and the fused kernels on the GPU (lavapipe in CI)
// against the same graphs unfused and against the CPU reference, over strides, padding, groups,
// split K and the 1×1 convolutions that run as matmuls.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "schedule/fusion.h"
#include "schedule/gpu_lowering.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using schedule::KernelGroup;

const KernelGroup* group_with(const std::vector<KernelGroup>& groups, NodeId v) {
  for (const KernelGroup& k : groups) {
    if (std::find(k.nodes.begin(), k.nodes.end(), v) != k.nodes.end()) return &k;
  }
  return nullptr;
}

TEST(ConvEpilogue, BiasAndReluInTheConvsLaunch) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 8, 8});
  Tensor w = g.parameter("w", {4, 3, 3, 3});
  Tensor b = g.parameter("b", {4, 1, 1});
  Tensor c = conv2d(x, w);
  g.output("y", relu(c + b));
  auto groups = schedule::fuse(g, {});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, KernelGroup::Kind::matmul_epilogue);
  EXPECT_EQ(groups[0].anchor, c.id());
  EXPECT_EQ(groups[0].nodes.front(), c.id());
  EXPECT_EQ(schedule::group_name(g, groups[0]), "conv2d+epilogue[add,relu]");
  // One launch (no split K at this size).
  EXPECT_EQ(schedule::lower_group(g, groups[0], {}).launches.size(), 1u);

  schedule::FusionOptions off;
  off.conv_epilogue = false;
  EXPECT_EQ(schedule::fuse(g, off).size(), 2u);
}

// The relu gradient's mask reads the conv's value: the conv stores it from its epilogue beside
// the activation, still one launch.
TEST(ConvEpilogue, ConvValueReadElsewhereIsAnotherOutput) {
  Graph g;
  Tensor x = g.input("x", {2, 3, 8, 8});
  Tensor w = g.parameter("w", {4, 3, 3, 3});
  Tensor b = g.parameter("b", {4});
  Conv2dOptions o;
  o.padding = {1, 1};
  Tensor c = conv2d(x, w, b, o);
  Tensor h = relu(c);
  g.output("pooled", max_pool2d(h));
  g.output("mask", gt(c, g.scalar(0.0)) * g.input("gy", {2, 4, 8, 8}));
  auto groups = schedule::fuse(g, {});
  const KernelGroup* k = group_with(groups, c.id());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->kind, KernelGroup::Kind::matmul_epilogue);
  EXPECT_NE(std::find(k->outputs.begin(), k->outputs.end(), c.id()), k->outputs.end());
  EXPECT_NE(std::find(k->outputs.begin(), k->outputs.end(), h.id()), k->outputs.end());
}

// A consumer group that itself waits on a group reading the conv: fusing would make a cycle.
TEST(ConvEpilogue, NoCycleThroughAnotherGroup) {
  Graph g;
  Tensor x = g.input("x", {1, 2, 6, 6});
  Tensor w = g.parameter("w", {2, 2, 3, 3});
  Conv2dOptions o;
  o.padding = {1, 1};
  Tensor c = conv2d(x, w, {}, o);
  Tensor s = sum(c);  // a reduction of the conv, read back by the conv's consumer
  g.output("y", relu(c) * s);
  auto groups = schedule::fuse(g, {});
  const KernelGroup* k = group_with(groups, c.id());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->kind, KernelGroup::Kind::single);
}

size_t launches(const Graph& lowered, const std::vector<KernelGroup>& groups) {
  size_t n = 0;
  for (const KernelGroup& k : groups) n += schedule::lower_group(lowered, k, {}).launches.size();
  return n;
}

TEST(ConvEpilogue, CnnTrainingStepNeedsFewerLaunches) {
  ClassifierSpec spec;
  spec.kind = ModelKind::cnn;
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, Optimizer::adam());
  const Graph lowered = schedule::lower_for_gpu(*c.graph);
  schedule::FusionOptions off;
  off.conv_epilogue = false;
  const auto before = schedule::fuse(lowered, off), after = schedule::fuse(lowered, {});
  const size_t n_before = launches(lowered, before), n_after = launches(lowered, after);
  std::printf("cnn Adam training step: %zu launches without conv epilogues, %zu with\n", n_before,
              n_after);
  size_t convs = 0;
  for (const KernelGroup& k : after) {
    if (k.kind == KernelGroup::Kind::matmul_epilogue &&
        lowered.node(k.anchor).op_name() == "conv2d") {
      ++convs;
    }
  }
  if (std::getenv("MN_PRINT_GROUPS")) {
    for (const KernelGroup& k : after)
      std::printf("  %s\n", schedule::group_name(lowered, k).c_str());
  }
  EXPECT_EQ(convs, 2u);  // both conv layers take their relu
  EXPECT_LT(n_after, n_before);
}

// GPU: fused against unfused against the reference.

// Sessions built with fusion off for the duration of a scope.
struct FusionOff {
  testing::ScopedEnv env{"MN_FUSION", "0"};
};

struct StepResult {
  std::map<std::string, Array> out;
  size_t dispatches = 0;
};

StepResult run_step(const Graph& g, const reference::Feeds& feeds) {
  StepResult r;
  auto s = build_session(g);
  for (const auto& [name, value] : feeds) s->set(name, value);
  s->step();
  for (const std::string& name : s->output_names()) r.out[name] = s->get(name);
  r.dispatches = s->memory().dispatches;
  return r;
}

struct Case {
  std::string name;
  Shape x, w;
  Conv2dOptions opt;
};

TEST(ConvEpilogueGpu, ReluBiasResidualOverConvVariants) {
  auto opts = [](int64_t stride, int64_t pad, int64_t groups) {
    Conv2dOptions o;
    o.stride = {stride, stride};
    o.padding = {pad, pad};
    o.groups = groups;
    return o;
  };
  const std::vector<Case> cases = {
      {"3x3", {2, 3, 7, 7}, {5, 3, 3, 3}, opts(1, 0, 1)},
      {"stride2-pad1", {2, 4, 9, 9}, {6, 4, 3, 3}, opts(2, 1, 1)},
      {"groups2-pad1", {2, 4, 6, 6}, {4, 2, 3, 3}, opts(1, 1, 2)},
      {"split-k", {1, 64, 6, 6}, {8, 64, 3, 3}, opts(1, 1, 1)},      // K = 576 over two launches
      {"1x1-matmul", {2, 64, 8, 8}, {64, 64, 1, 1}, opts(1, 0, 1)},  // fills 64×64 tiles
  };
  for (const Case& k : cases) {
    auto rng = testing::rng_for("conv-epilogue-" + k.name);
    Graph g;
    reference::Feeds feeds;
    auto input = [&](const std::string& name, Shape shape) {
      Tensor t = g.input(name, std::move(shape));
      feeds[name] = testing::random_array(rng, t.type());
      return t;
    };
    Tensor x = input("x", k.x);
    const int64_t o = k.w[0];
    Tensor bias = input("bias", {o});
    Tensor bcast = input("bcast", {o, 1, 1});
    // A weight per conv, so that no two are the same value.
    int weights = 0;
    auto conv = [&](Tensor b) {
      return conv2d(x, input("w" + std::to_string(weights++), k.w), b, k.opt);
    };
    Tensor plain = conv({});
    const Shape y = plain.type().shape;
    Tensor residual = input("residual", y);
    g.output("relu", relu(plain));                          // conv + relu
    g.output("bias_relu", relu(conv(bias) + bcast));        // both biases, relu
    g.output("residual_add", conv(bias) * 0.5 + residual);  // residual add
    Tensor kept = conv(bias);  // the conv's value stored by its epilogue too
    g.output("kept", kept);
    g.output("kept_tanh", tanh(kept));
    if (y == k.x) g.output("own_input", conv({}) + x);  // reads the conv's own input

    const StepResult fused = run_step(g, feeds);
    StepResult unfused;
    {
      FusionOff off;
      unfused = run_step(g, feeds);
    }
    const auto ref = reference::evaluate(g, feeds);
    for (const auto& [name, expected] : ref) {
      EXPECT_TRUE(testing::elementwise_near(fused.out.at(name), expected, 1e-4))
          << k.name << " " << name;
      EXPECT_TRUE(testing::elementwise_near(fused.out.at(name), unfused.out.at(name), 1e-5))
          << k.name << " " << name << " fused vs unfused";
    }
    std::printf("%s: %zu dispatches unfused, %zu fused\n", k.name.c_str(), unfused.dispatches,
                fused.dispatches);
    EXPECT_LT(fused.dispatches, unfused.dispatches) << k.name;
  }
}

}  // namespace
}  // namespace mn
