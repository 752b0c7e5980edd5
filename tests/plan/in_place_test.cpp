// In-place updates in the step plan: assign(state, cache_write(state, ...)) and the fused
// optimizer updates write the state's own buffer (no second buffer, no assignment copy);
// readers of the old value run before the write, or the write falls back to the copying form.
#include <gtest/gtest.h>

#include <algorithm>

#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>

#include "plan/in_place.h"
#include "plan/step_plan.h"

namespace mn {
namespace {

constexpr int64_t kT = 8, kD = 4;
const Shape kCache{1, 2, kT, kD};

struct CacheGraph {
  Graph g;
  Tensor cache, next;
  CacheGraph() {
    cache = g.state("cache", kCache);
    Tensor update = g.input("update", {1, 2, 1, kD});
    Tensor pos = g.input("pos", {1}, DType::i32);
    next = cache_write(cache, update, pos);
    g.assign(cache, next);
  }
};

// Buffers of the cache's size, the index slots aside (cache_write checks its positions).
size_t cache_sized_buffers(const plan::StepPlan& p) {
  const uint64_t bytes = plan::device_bytes({kCache, DType::f32});
  size_t n = 0;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    n += p.buffers[b].bytes == bytes && static_cast<int>(b) != p.index_region.buffer;
  }
  return n;
}

size_t launches_named(const plan::StepPlan& p, std::string_view name) {
  return static_cast<size_t>(std::count_if(p.launches.begin(), p.launches.end(),
                                           [&](const auto& l) { return l.kernel.name == name; }));
}

TEST(InPlace, AssignedCacheWriteUsesTheStateBuffer) {
  for (bool optimize : {true, false}) {
    CacheGraph c;
    c.g.output("total", sum(c.next));  // the updated cache is read after the write
    plan::PlanOptions po;
    po.optimize.enabled = po.fuse = optimize;
    const plan::StepPlan p = plan::make_step_plan(c.g, po);
    EXPECT_TRUE(p.assignment_copies.empty()) << "optimize=" << optimize;
    EXPECT_EQ(cache_sized_buffers(p), 1u) << "optimize=" << optimize;
    EXPECT_EQ(launches_named(p, "cache_write_copy"), 0u);
    EXPECT_EQ(launches_named(p, "cache_write"), 1u);
  }
}

TEST(InPlace, ReaderOfTheOldValueIsOrderedFirst) {
  CacheGraph c;
  c.g.output("old", sum(c.cache * c.cache));
  c.g.output("new", sum(c.next));
  const plan::StepPlan p = plan::make_step_plan(c.g, {});
  EXPECT_TRUE(p.assignment_copies.empty());
  EXPECT_EQ(cache_sized_buffers(p), 1u);
  const NodeId state = p.persistents.at("cache");
  size_t write = p.launches.size();
  for (size_t i = 0; i < p.launches.size(); ++i) {
    if (p.launches[i].kernel.name == "cache_write") write = i;
  }
  ASSERT_LT(write, p.launches.size());
  size_t old_readers = 0;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    if (i == write) continue;
    for (NodeId n : p.launches[i].nodes) {
      const auto& ins = p.graph.node(n).inputs;
      if (std::find(ins.begin(), ins.end(), state) == ins.end()) continue;
      ++old_readers;
      EXPECT_LT(i, write) << p.launches[i].kernel.name << " reads the old cache after the write";
    }
  }
  EXPECT_GE(old_readers, 1u);
}

TEST(InPlace, ReaderNeedingBothValuesFallsBackToACopy) {
  CacheGraph c;
  c.g.output("mixed", sum(c.cache * c.next));  // one kernel reads the old and the new value
  plan::PlanOptions po;
  const plan::StepPlan p = plan::make_step_plan(c.g, po);
  EXPECT_EQ(launches_named(p, "cache_write_copy"), 1u);
  EXPECT_EQ(p.assignment_copies.size(), 1u);
  EXPECT_EQ(cache_sized_buffers(p), 2u);
}

TEST(InPlace, OtherAssignmentOfTheOldValueFallsBackToACopy) {
  CacheGraph c;
  Tensor previous = c.g.state("previous", kCache);
  c.g.assign(previous, c.cache);
  const plan::StepPlan p = plan::make_step_plan(c.g, {});
  EXPECT_EQ(launches_named(p, "cache_write_copy"), 1u);
}

// The fused optimizer update of a transformer writes every parameter and moment into its own
// buffer: no assignment copies, and each assigned value shares its target's buffer.
TEST(InPlace, FusedOptimizerUpdatesWriteTheParameters) {
  for (const Optimizer& opt : {Optimizer::adamw(), Optimizer::sgd({.momentum = 0.9})}) {
    TransformerSpec spec = smollm2_135m();
    spec.layers = 2;
    spec.vocab = 256;
    spec.sequence = 16;
    LanguageModel m = build_transformer(spec);
    add_training_step(m.loss, opt);
    plan::PlanOptions po;
    const plan::StepPlan p = plan::make_step_plan(*m.graph, po);
    EXPECT_TRUE(p.assignment_copies.empty()) << p.assignment_copies.size() << " copies";
    for (const auto& [target, value] : p.graph.assignments()) {
      EXPECT_EQ(p.node_buffer[value], p.node_buffer[target]) << p.graph.node(target).name;
    }
    // The kernels writing them bind each such buffer once, read-write.
    size_t written_inputs = 0;
    for (const auto& l : p.launches) {
      for (const auto& b : l.kernel.bindings) {
        written_inputs += b.written && b.arg.kind == codegen::ArgRef::Kind::input;
      }
    }
    EXPECT_EQ(written_inputs, p.graph.assignments().size());
  }
}

// A pointwise group of two segments over a state s: one computes s's new value, the other reads
// s through a broadcast (another thread's element). Written in place, that reader could see the
// new value, so the state keeps its copy; without the reader it is written in place.
struct TwoSegments {
  Graph g;
  Tensor s, x, a, b;
  explicit TwoSegments(bool other_reads_state) {
    s = g.state("s", {3});
    x = g.input("x", {4, 3});
    a = other_reads_state ? x * s : x * 2.0f;
    b = s + 1.0f;
    g.assign(s, b);
    g.output("a", a);
  }
  std::vector<schedule::KernelGroup> groups() const {
    schedule::KernelGroup k;
    k.kind = schedule::KernelGroup::Kind::pointwise;
    k.inputs = {x.id(), s.id()};
    k.outputs = {a.id(), b.id()};
    k.nodes = {a.id(), b.id()};
    k.segments = {{{4, 3}, {a.id()}, {a.id()}}, {{3}, {b.id()}, {b.id()}}};
    return {k};
  }
};

TEST(InPlace, StateReadByAnotherSegmentKeepsItsBuffer) {
  TwoSegments read(true), unread(false);
  std::vector<schedule::KernelGroup> groups = read.groups();
  EXPECT_EQ(plan::plan_in_place(read.g, groups), (std::vector<std::vector<int>>{{-1, -1}}));
  groups = unread.groups();
  EXPECT_EQ(plan::plan_in_place(unread.g, groups), (std::vector<std::vector<int>>{{-1, 1}}));
}

}  // namespace
}  // namespace mn
