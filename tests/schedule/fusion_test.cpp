// Grouping of the GPU-lowered graph into kernels: structure of the groups on small graphs, and
// the invariants every grouping must keep (each needed node once, dispatch order valid).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>

#include "plan/step_plan.h"
#include "schedule/fusion.h"
#include "schedule/gpu_lowering.h"

namespace mn {
namespace {

using schedule::KernelGroup;

bool is_source(const Node& n) {
  const std::string_view op = n.op_name();
  return op == "input" || op == "parameter" || op == "state" || op == "constant";
}

// Every needed non-source node in exactly one group; every group input computed before it (a
// source or an output of an earlier group); outputs are the values read outside the group.
void expect_valid(const Graph& g, const std::vector<KernelGroup>& groups) {
  const std::vector<char> needed = schedule::needed_nodes(g);
  std::vector<int> group_of(g.size(), -1);
  for (size_t k = 0; k < groups.size(); ++k) {
    for (NodeId v : groups[k].nodes) {
      ASSERT_EQ(group_of[v], -1) << "node %" << v << " in two groups";
      group_of[v] = static_cast<int>(k);
    }
  }
  std::set<NodeId> sinks;
  for (const auto& [name, id] : g.outputs()) sinks.insert(id);
  for (const auto& [target, value] : g.assignments()) sinks.insert(value);
  std::vector<char> available(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (!needed[i]) continue;
    if (is_source(n)) {
      available[i] = 1;
    } else {
      EXPECT_GE(group_of[i], 0) << "node %" << i << " (" << n.op_name() << ") in no group";
    }
  }
  for (size_t k = 0; k < groups.size(); ++k) {
    const KernelGroup& grp = groups[k];
    std::set<NodeId> members(grp.nodes.begin(), grp.nodes.end());
    for (NodeId v : grp.nodes) {
      for (NodeId in : g.node(v).inputs) {
        if (members.count(in)) continue;
        if (grp.kind != KernelGroup::Kind::single && schedule::is_scalar_constant(g.node(in))) {
          continue;  // a literal in the kernel's source
        }
        EXPECT_TRUE(available[in]) << "group " << k << " reads %" << in << " before it exists";
        EXPECT_NE(std::find(grp.inputs.begin(), grp.inputs.end(), in), grp.inputs.end())
            << "group " << k << " reads %" << in << " without an input for it";
      }
    }
    for (NodeId v : grp.nodes) {
      bool outside = sinks.count(v) > 0;
      for (size_t c = 0; c < g.size(); ++c) {
        if (!needed[c] || members.count(static_cast<NodeId>(c))) continue;
        const auto& ins = g.node(static_cast<NodeId>(c)).inputs;
        outside = outside || std::find(ins.begin(), ins.end(), v) != ins.end();
      }
      const bool is_output =
          std::find(grp.outputs.begin(), grp.outputs.end(), v) != grp.outputs.end();
      EXPECT_EQ(outside, is_output) << "node %" << v << " of group " << k;
    }
    for (NodeId o : grp.outputs) available[o] = 1;
  }
}

std::vector<KernelGroup> fused(const Graph& g, uint32_t max_bindings = 32) {
  schedule::FusionOptions o;
  o.max_bindings = max_bindings;
  auto groups = schedule::fuse(g, o);
  expect_valid(g, groups);
  return groups;
}

size_t count_kind(const std::vector<KernelGroup>& groups, KernelGroup::Kind kind) {
  return std::count_if(groups.begin(), groups.end(),
                       [&](const KernelGroup& k) { return k.kind == kind; });
}

TEST(Fusion, ChainIsOneKernel) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor y = relu(exp(x) * 2.0 + 1.0);
  g.output("y", y);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, KernelGroup::Kind::pointwise);
  EXPECT_EQ(groups[0].nodes.size(), 4u);
  EXPECT_EQ(groups[0].outputs, std::vector<NodeId>{y.id()});
  EXPECT_EQ(schedule::group_name(g, groups[0]), "fused_pointwise[exp,mul,add,relu]");
}

TEST(Fusion, DiamondKeepsSharedValueInRegisters) {
  Graph g;
  Tensor x = g.input("x", {3, 5});
  Tensor a = exp(x);
  Tensor d = sin(a) + cos(a);
  g.output("d", d);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes.size(), 4u);
  EXPECT_EQ(groups[0].outputs, std::vector<NodeId>{d.id()});
}

TEST(Fusion, ValueReadOutsideBecomesSecondOutput) {
  Graph g;
  Tensor x = g.input("x", {3, 5});
  Tensor a = exp(x);
  Tensor s = sum(a, {1});
  Tensor d = a * 2.0;
  g.output("s", s);
  g.output("d", d);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].kind, KernelGroup::Kind::pointwise);
  EXPECT_EQ(groups[0].outputs, (std::vector<NodeId>{a.id(), d.id()}));
  EXPECT_EQ(groups[1].nodes, std::vector<NodeId>{s.id()});
}

// a feeds a reduction whose result the consumer of a also reads: putting a into its consumer's
// kernel would make the two kernels wait on each other.
TEST(Fusion, NoCycleThroughAnotherKernel) {
  Graph g;
  Tensor x = g.input("x", {3, 5});
  Tensor a = exp(x);
  Tensor d = a * sum(a, {1}, true);
  g.output("d", d);
  auto groups = fused(g);
  EXPECT_EQ(groups.size(), 3u);
}

TEST(Fusion, BroadcastOperandsAndSmallProducers) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor b = g.parameter("b", {8});
  Tensor y = relu(x + exp(b));  // exp(b) has one consumer: evaluated per element, no kernel
  g.output("y", y);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].segments.at(0).domain, (Shape{4, 8}));
  EXPECT_EQ(std::set<NodeId>(groups[0].inputs.begin(), groups[0].inputs.end()),
            (std::set<NodeId>{x.id(), b.id()}));
}

// A small value read by two kernels is computed once; the two independent kernels at the end
// of the step share one launch.
TEST(Fusion, SharedSmallValueIsComputedOnce) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor b = g.parameter("b", {8});
  Tensor t = exp(b);
  g.output("y1", relu(x + t));
  g.output("y2", tanh(x * t));
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].nodes, std::vector<NodeId>{t.id()});
  EXPECT_EQ(groups[1].segments.size(), 2u);
  EXPECT_EQ(groups[1].outputs.size(), 2u);
}

// Forty operands summed: the chain splits into kernels that each bind at most 32 buffers.
TEST(Fusion, KernelsStayWithinTheBindingLimit) {
  Graph g;
  Tensor acc = g.input("x0", {4, 8});
  for (int i = 1; i < 40; ++i) acc = acc + g.input("x" + std::to_string(i), {4, 8});
  g.output("y", acc);
  auto groups = fused(g, 32);
  EXPECT_EQ(groups.size(), 2u);
  for (const KernelGroup& k : groups) EXPECT_LE(k.inputs.size() + k.outputs.size(), 32u);
}

// Scalars of the step count read by several kernels (Adam's bias corrections once the
// optimizer shares them): computed once, both in the first launch.
TEST(Fusion, SourceOnlyScalarsRunTogetherFirst) {
  Graph g;
  Tensor step = g.input("step", {});
  Tensor x = g.input("x", {4, 8});
  Tensor w1 = g.parameter("w1", {8, 16});
  Tensor w2 = g.parameter("w2", {8, 16});
  Tensor a = 1.0 - pow(g.scalar(0.9), step);
  Tensor c = sqrt(1.0 - pow(g.scalar(0.99), step));
  g.output("y1", matmul(x, w1) * a);
  g.output("y2", matmul(x, w2) / c);
  g.output("y3", matmul(x, w2) * a + c);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].kind, KernelGroup::Kind::pointwise);
  EXPECT_EQ(groups[0].segments.size(), 2u);
  EXPECT_EQ(groups[0].outputs, (std::vector<NodeId>{a.id(), c.id()}));
  EXPECT_EQ(count_kind(groups, KernelGroup::Kind::matmul_epilogue), 3u);
}

// A large value made from sources only (a gradient accumulator's zeros) launches when its reader
// waits for nothing else, not at the start: it is not live through the chain before it.
TEST(Fusion, LargeSourceOnlyValuesLaunchWhenTheirReaderIsReady) {
  Graph g;
  Tensor x = g.input("x", {512, 512});
  Tensor w = g.parameter("w", {512, 512});
  Tensor h = x;
  for (int i = 0; i < 4; ++i) h = relu(matmul(h, w));
  Tensor zeros = broadcast_to(g.scalar(0.0), {512, 512});  // 1 MiB
  Tensor y = matmul(h, w) + zeros;
  g.output("y", y);
  auto groups = fused(g);
  auto launch_of = [&](NodeId v) {
    for (size_t k = 0; k < groups.size(); ++k) {
      if (std::find(groups[k].nodes.begin(), groups[k].nodes.end(), v) != groups[k].nodes.end()) {
        return static_cast<int>(k);
      }
    }
    return -1;
  };
  EXPECT_GT(launch_of(zeros.id()), launch_of(h.id()));
  EXPECT_LT(launch_of(zeros.id()), launch_of(y.id()));
}

TEST(Fusion, UnfusedOptionsKeepOneKernelPerNode) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  g.output("y", relu(exp(x) * 2.0 + 1.0));
  auto groups = schedule::unfused_groups(g);
  expect_valid(g, groups);
  EXPECT_EQ(groups.size(), 4u);
}

TEST(Fusion, MatmulTakesBiasActivationAndResidual) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor w = g.parameter("w", {8, 8});
  Tensor b = g.parameter("b", {8});
  Tensor h = relu(matmul(x, w) + b);
  Tensor y = matmul(h, w) + h;  // residual: the epilogue reads the matmul's own operand
  g.output("y", y);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(count_kind(groups, KernelGroup::Kind::matmul_epilogue), 2u);
  EXPECT_EQ(g.node(groups[0].nodes.front()).op_name(), "matmul");
  EXPECT_EQ(groups[0].outputs, std::vector<NodeId>{h.id()});
  EXPECT_EQ(schedule::group_name(g, groups[0]), "matmul+epilogue[add,relu]");
}

// The pre-activation kept for the backward pass and the activation: both stored by one kernel.
TEST(Fusion, MatmulEpilogueWithTwoOutputs) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor w = g.parameter("w", {8, 16});
  Tensor b = g.parameter("b", {16});
  Tensor pre = matmul(x, w) + b;
  g.output("mask", gt(pre, g.scalar(0.0)));
  g.output("h", relu(pre));
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, KernelGroup::Kind::matmul_epilogue);
  EXPECT_EQ(groups[0].outputs.size(), 2u);
}

// The matmul's value read elsewhere too: it keeps its own store, the consumers fuse apart.
TEST(Fusion, MatmulReadTwiceKeepsItsKernel) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor w = g.parameter("w", {8, 8});
  Tensor m = matmul(x, w);
  g.output("m", m);
  g.output("y", relu(m));
  auto groups = fused(g);
  EXPECT_EQ(count_kind(groups, KernelGroup::Kind::matmul_epilogue), 0u);
  EXPECT_EQ(groups.size(), 2u);
}

TEST(Fusion, ReductionTakesPointwiseProducers) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor b = g.parameter("b", {8});
  Tensor s = sum((x - b) * (x - b), {1});  // x - b is read twice: still inside the prologue
  Tensor m = max(exp(x), {0});
  g.output("s", rsqrt(s + 1e-5));
  g.output("m", m);
  auto groups = fused(g);
  ASSERT_EQ(groups.size(), 2u);  // rsqrt(s + eps) too runs in the reduction, before the store
  EXPECT_EQ(count_kind(groups, KernelGroup::Kind::reduction), 2u);
  std::set<std::string> names;
  for (const KernelGroup& k : groups) names.insert(schedule::group_name(g, k));
  EXPECT_EQ(names, (std::set<std::string>{"sum+prologue[sub,sub,mul]+epilogue[add,rsqrt]",
                                          "max+prologue[exp]"}));
}

// The reduced operand is read elsewhere too: it is stored, and the reduction reads it.
TEST(Fusion, SharedReductionOperandIsStored) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor e = exp(x);
  g.output("s", sum(e));
  g.output("e", e);
  auto groups = fused(g);
  // exp(x) is stored; the sum reads it, and takes no prologue.
  EXPECT_EQ(groups.size(), 2u);
  EXPECT_EQ(schedule::group_name(g, groups[1]), "sum");
}

Graph lowered_training_step(ModelKind kind, const Optimizer& opt) {
  ClassifierSpec spec;
  spec.kind = kind;
  spec.batch = 8;
  spec.hidden = {32, 16};
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, opt);
  return schedule::lower_for_gpu(*c.graph);
}

size_t updates(const Graph& g, const std::vector<KernelGroup>& groups) {
  size_t n = 0;
  for (const KernelGroup& k : groups) {
    n += schedule::group_name(g, k).rfind("optimizer_update", 0) == 0 ? 1 : 0;
  }
  return n;
}

// Adam over six parameters: every update (m, v and the parameter) is a segment of the merged
// end-of-step launches, never a matmul's epilogue (which could not write in place), in one
// launch when the bindings allow, in two under a limit of 32.
TEST(Fusion, AdamUpdatesInFewLaunches) {
  Graph g = lowered_training_step(ModelKind::mlp, Optimizer::adam());
  std::set<NodeId> assigned;
  for (const auto& [target, value] : g.assignments()) assigned.insert(value);
  for (uint32_t limit : {1000u, 32u}) {
    auto groups = fused(g, limit);
    size_t writers = 0, segments = 0;
    for (const KernelGroup& k : groups) {
      const bool writes = std::any_of(k.outputs.begin(), k.outputs.end(),
                                      [&](NodeId o) { return assigned.count(o) > 0; });
      if (!writes) continue;
      ++writers;
      EXPECT_EQ(k.kind, KernelGroup::Kind::pointwise);
      EXPECT_EQ(schedule::group_name(g, k).rfind("optimizer_update", 0), 0u);
      segments += k.segments.size();
      EXPECT_LE(k.inputs.size() + k.outputs.size(), limit);
    }
    EXPECT_EQ(segments, 6u);
    EXPECT_EQ(writers, limit == 32u ? 2u : 1u);
  }
}

TEST(Fusion, TrainingStepsNeedFarFewerLaunches) {
  for (ModelKind kind : {ModelKind::mlp, ModelKind::cnn}) {
    for (const Optimizer& opt : {Optimizer::sgd({.momentum = 0.9}), Optimizer::adamw()}) {
      Graph g = lowered_training_step(kind, opt);
      auto groups = fused(g);
      auto single = schedule::unfused_groups(g);
      EXPECT_LT(groups.size() * 2, single.size()) << model_name(kind);
    }
  }
}

// Dispatches of whole step plans with fusion off and on (what the runtime records).
TEST(Fusion, StepPlanDispatchCounts) {
  // Without the optimizer, so that the counts show what fusion alone does.
  auto dispatches = [](const Graph& g, bool fuse) {
    plan::PlanOptions o;
    o.fuse = fuse;
    o.optimize.enabled = false;
    return plan::make_step_plan(g, o).launches.size();
  };
  for (ModelKind kind : {ModelKind::mlp, ModelKind::cnn}) {
    ClassifierSpec spec;
    spec.kind = kind;
    Classifier c = build_classifier(spec);
    add_training_step(c.loss, Optimizer::adam());
    const size_t off = dispatches(*c.graph, false), on = dispatches(*c.graph, true);
    std::printf("%s Adam training step: %zu dispatches unfused, %zu fused\n", model_name(kind), off,
                on);
    EXPECT_LT(on * 2, off);
  }
  TransformerSpec t;
  t.layers = 2;
  t.hidden = 64;
  t.heads = 4;
  t.kv_heads = 2;
  t.ffn = 128;
  t.vocab = 256;
  t.sequence = 16;
  LanguageModel lm = build_transformer(t);
  add_training_step(lm.loss, Optimizer::adamw());
  const size_t off = dispatches(*lm.graph, false), on = dispatches(*lm.graph, true);
  std::printf("transformer (2 layers) AdamW training step: %zu dispatches unfused, %zu fused\n",
              off, on);
  EXPECT_LT(on * 3, off);
}

}  // namespace
}  // namespace mn
