// make_step_plan's memory against an oracle of its own: when each buffer must hold its value is
// read off the plan's launches (every binding), its inputs, persistent tensors and outputs, and
// its assignment copies (which run after the last launch), without the planner's first_use,
// last_use or lifetimes_overlap; no two buffers needed at the same launch may share a byte.
// Views (a reshape) share their source's buffer, scratch buffers live within their kernel, and
// the value an assignment copies survives to the copy. The oracle catches a plan moved onto a
// live buffer.
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/vision.h>

#include "plan/barrier_windows.h"
#include "plan/step_plan.h"

namespace mn::plan {
namespace {

struct Range {
  int first = INT_MAX, last = -1;
  void extend(int at) {
    first = std::min(first, at);
    last = std::max(last, at);
  }
  bool meets(const Range& o) const { return first <= o.last && o.first <= last; }
};

// When each buffer's bytes are needed, in launch indices; launches.size() stands for the
// assignment copies and readbacks after the last launch.
std::vector<Range> needed(const StepPlan& p) {
  const int end = static_cast<int>(p.launches.size());
  std::vector<Range> r(p.buffers.size());
  for (int i = 0; i < end; ++i) {
    for (int b : p.launches[static_cast<size_t>(i)].buffers) r[static_cast<size_t>(b)].extend(i);
  }
  // Written by the host before the step, or kept across steps: needed throughout.
  for (const auto* names : {&p.inputs, &p.persistents}) {
    for (const auto& [name, id] : *names) {
      const int b = p.node_buffer[static_cast<size_t>(id)];
      r[static_cast<size_t>(b)].extend(0);
      r[static_cast<size_t>(b)].extend(end);
    }
  }
  for (size_t id = 0; id < p.graph.size(); ++id) {
    if (p.graph.node(static_cast<NodeId>(id)).op_name() == std::string_view("constant") &&
        p.node_buffer[id] >= 0) {
      r[static_cast<size_t>(p.node_buffer[id])].extend(0);
      r[static_cast<size_t>(p.node_buffer[id])].extend(end);
    }
  }
  for (const auto& [name, id] : p.outputs)
    r[static_cast<size_t>(p.node_buffer[static_cast<size_t>(id)])].extend(end);
  for (const auto& [from, to] : p.assignment_copies) {
    r[static_cast<size_t>(from)].extend(end);
    r[static_cast<size_t>(to)].extend(end);
  }
  return r;
}

// Everything wrong with the plan's placement: buffers needed at the same time that share bytes,
// misaligned or out-of-arena offsets, buffers never used (but a removed launch's scratch).
std::vector<std::string> placement_errors(const StepPlan& p, uint64_t alignment) {
  std::vector<std::string> errors;
  const std::vector<Range> r = needed(p);
  for (size_t a = 0; a < p.buffers.size(); ++a) {
    const PlannedBuffer& x = p.buffers[a];
    // (The scratch of a launch removed as a repeat, plan/shared_launches.h, takes no bytes.)
    if (r[a].last < 0 && x.bytes > 0) {
      errors.push_back("buffer " + std::to_string(a) + " is never used");
    }
    if (x.offset % alignment != 0) errors.push_back("buffer " + std::to_string(a) + " misaligned");
    if (x.offset + x.bytes > p.arena_bytes) {
      errors.push_back("buffer " + std::to_string(a) + " past the arena");
    }
    for (size_t b = a + 1; b < p.buffers.size(); ++b) {
      const PlannedBuffer& y = p.buffers[b];
      const bool disjoint = x.offset + x.bytes <= y.offset || y.offset + y.bytes <= x.offset;
      if (r[a].meets(r[b]) && !disjoint) {
        errors.push_back("buffers " + std::to_string(a) + " and " + std::to_string(b) +
                         " share bytes while both are needed (launches " +
                         std::to_string(std::max(r[a].first, r[b].first)) + " to " +
                         std::to_string(std::min(r[a].last, r[b].last)) + ")");
      }
    }
  }
  return errors;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

PlanOptions as_written() {
  PlanOptions o;
  o.fuse = false;
  o.optimize.enabled = false;
  return o;
}

// A training step of a small MLP: its assignments copy new parameters and optimizer state.
TEST(StepPlan, TrainingStepBuffersNeverShareWhileNeeded) {
  for (const bool fuse : {false, true}) {
    ClassifierSpec spec;
    spec.batch = 8;
    spec.hidden = {32, 16};
    Classifier c = build_classifier(spec);
    add_training_step(c.loss, Optimizer::adam({.weight_decay = 0.01}));
    PlanOptions o;
    o.fuse = fuse;
    const StepPlan p = make_step_plan(*c.graph, o);
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    EXPECT_TRUE(placement_errors(p, o.alignment).empty())
        << joined(placement_errors(p, o.alignment));
    // As written, every update is copied back after the step; fused, the optimizer's updates
    // write into the tensors they update (none is absorbed by a matmul's epilogue).
    EXPECT_EQ(p.assignment_copies.empty(), fuse);
    // Memory was actually shared: the arena is smaller than one aligned buffer per value.
    uint64_t total = 0;
    for (const PlannedBuffer& b : p.buffers)
      total += (b.bytes + o.alignment - 1) / o.alignment * o.alignment;
    EXPECT_LT(p.arena_bytes, total);
  }
}

// A ResNet-18 training step at batch 16, 112 × 112: both orders of the gradient kernels are valid
// placements, and launching a weight gradient as soon as it frees its activations is the
// smaller here (the gradients are smaller than what they read). Without an arena slack the
// planner keeps the smaller; with the default slack (10 %) the one of fewer barrier windows
// among those within it, whose arena is then at most 10 % above the smaller.
TEST(StepPlan, GradientKernelOrdersAreBothValidAndTheSmallerIsKept) {
  Graph g;
  auto net = vision::resnet({.depth = 18, .num_classes = 10});
  Tensor logits = net->forward(g.input("x", {16, 3, 112, 112}));
  add_training_step(cross_entropy(logits, g.input("y", {16}, DType::i32)),
                    Optimizer::sgd({.lr = 0.01, .momentum = 0.9}));
  PlanOptions graph_order, eager, smallest, chosen;
  graph_order.eager_gradients = false;
  eager.eager_gradients = true;
  smallest.device.plan_arena_slack = 0.0;
  const StepPlan a = make_step_plan(g, graph_order);
  const StepPlan b = make_step_plan(g, eager);
  const StepPlan c = make_step_plan(g, smallest);
  const StepPlan d = make_step_plan(g, chosen);
  for (const StepPlan* p : {&a, &b}) {
    EXPECT_TRUE(placement_errors(*p, chosen.alignment).empty())
        << joined(placement_errors(*p, chosen.alignment));
  }
  EXPECT_LT(b.arena_bytes, a.arena_bytes);
  EXPECT_EQ(c.arena_bytes, std::min(a.arena_bytes, b.arena_bytes));
  ASSERT_DOUBLE_EQ(chosen.device.plan_arena_slack, 0.10);
  EXPECT_LE(static_cast<double>(d.arena_bytes), 1.10 * static_cast<double>(c.arena_bytes));
  EXPECT_LE(barrier_windows(d.launches), barrier_windows(c.launches));
  EXPECT_TRUE(d.arena_bytes == a.arena_bytes || d.arena_bytes == b.arena_bytes);
}

// A reshape is a view: no launch, the buffer of its source; the source's bytes stay needed
// while the view is read.
TEST(StepPlan, ViewsShareTheirSourcesBuffer) {
  Graph g;
  Tensor x = g.input("x", {4, 6});
  Tensor h = relu(x * 2.0);
  Tensor v = reshape(h, {24});
  Tensor y = exp(v) + 1.0;
  g.output("y", y * 3.0);
  const PlanOptions o = as_written();
  const StepPlan p = make_step_plan(g, o);
  NodeId view = -1, source = -1;
  for (size_t i = 0; i < p.graph.size(); ++i) {
    const Node& n = p.graph.node(static_cast<NodeId>(i));
    if (n.op_name() == std::string_view("reshape")) {
      view = static_cast<NodeId>(i);
      source = n.inputs.at(0);
    }
  }
  ASSERT_GE(view, 0);
  EXPECT_GE(p.node_buffer[static_cast<size_t>(view)], 0);
  EXPECT_EQ(p.node_buffer[static_cast<size_t>(view)], p.node_buffer[static_cast<size_t>(source)]);
  for (const PlannedLaunch& l : p.launches) {
    for (NodeId n : l.nodes) EXPECT_NE(n, view) << l.kernel.name;
  }
  EXPECT_TRUE(placement_errors(p, o.alignment).empty()) << joined(placement_errors(p, o.alignment));
}

// A convolution whose single output tile splits K: its partial sums go to a scratch buffer (no
// node) used only by that convolution's launches, whose bytes later values may reuse.
TEST(StepPlan, ScratchLivesWithinItsKernel) {
  Graph g;
  Tensor x = g.input("x", {1, 256, 4, 4});
  Tensor w = g.input("w", {64, 256, 3, 3});
  Conv2dOptions co;
  co.padding = {1, 1};
  Tensor y = conv2d(x, w, {}, co);
  g.output("z", tanh(relu(y) * 2.0));
  const PlanOptions o = as_written();
  const StepPlan p = make_step_plan(g, o);
  int scratch = -1;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].node < 0) scratch = static_cast<int>(b);
  }
  ASSERT_GE(scratch, 0) << "no scratch buffer: the convolution did not split K";
  const std::vector<Range> r = needed(p);
  for (int i = r[static_cast<size_t>(scratch)].first; i <= r[static_cast<size_t>(scratch)].last;
       ++i) {
    EXPECT_NE(p.launches[static_cast<size_t>(i)].kernel.name.find("conv2d"), std::string::npos)
        << p.launches[static_cast<size_t>(i)].kernel.name;
  }
  EXPECT_TRUE(placement_errors(p, o.alignment).empty()) << joined(placement_errors(p, o.alignment));
}

// The mutation: one buffer moved onto another that is needed at the same launch. The
// oracle must say so (it is the only thing these tests rely on).
TEST(StepPlan, TheOracleCatchesAPlanThatSharesLiveBytes) {
  ClassifierSpec spec;
  spec.batch = 8;
  spec.hidden = {16};
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, Optimizer::sgd({.momentum = 0.9}));
  const PlanOptions o = as_written();
  StepPlan p = make_step_plan(*c.graph, o);
  ASSERT_TRUE(placement_errors(p, o.alignment).empty());
  // The value an assignment copies and any other buffer needed at the end of the step.
  const auto [from, to] = p.assignment_copies.front();
  int other = -1;
  const std::vector<Range> r = needed(p);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (static_cast<int>(b) != from && static_cast<int>(b) != to &&
        r[b].meets(r[static_cast<size_t>(from)]) && p.buffers[b].bytes > 0) {
      other = static_cast<int>(b);
      break;
    }
  }
  ASSERT_GE(other, 0);
  p.buffers[static_cast<size_t>(from)].offset = p.buffers[static_cast<size_t>(other)].offset;
  EXPECT_FALSE(placement_errors(p, o.alignment).empty());
}

}  // namespace
}  // namespace mn::plan
