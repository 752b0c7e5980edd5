// The composite rules over the whole op table: every sample of every op with a decomposition,
// in both directions.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/models.h>

#include "composite_test_util.h"
#include "optimize/rules_composite_template.h"

namespace mn::testing {
namespace {

struct SampleGraph {
  Graph composite;  // y = op(inputs)
  Graph primitive;  // y = op's decomposition of the same inputs
};

SampleGraph sample_graphs(const OpDef& def, const OpSample& s) {
  SampleGraph sg;
  std::vector<Tensor> a, b;
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    a.push_back(sg.composite.input(name, s.inputs[i].shape, s.inputs[i].dtype));
    b.push_back(sg.primitive.input(name, s.inputs[i].shape, s.inputs[i].dtype));
  }
  sg.composite.output("y", sg.composite.apply(def.name, s.attrs, a));
  std::vector<TensorType> types(s.inputs.begin(), s.inputs.end());
  std::vector<NodeId> ids;
  ids.reserve(b.size());
  for (const Tensor& t : b) ids.push_back(t.id());
  Node node{&def, s.attrs, ids, def.infer(s.attrs, types), {}};
  sg.primitive.output("y", def.decompose(node, b));
  return sg;
}

// Whether y's class holds `def` applied to the graph's inputs (in order) with attributes that
// mean the sample's: equal, or spelled differently (axis -1 for 2, no axes for all of them) with
// the same decomposition.
bool recognized_as_sample(const CompositeRun& run, const Graph& g, const OpDef& def,
                          const OpSample& s) {
  const egraph::EGraph& eg = run.teg.egraph();
  const egraph::Id y = eg.find(run.roots.outputs[0].second);
  const egraph::OpId op = run.teg.op(def.name);
  auto want = optimize::composite::expand(def, s.attrs, s.inputs);
  for (egraph::Id n : eg.class_nodes(y)) {
    const egraph::ENode& node = eg.node(n);
    if (node.op() != op || node.arity() != g.inputs().size()) continue;
    bool same_operands = true;
    for (size_t i = 0; i < node.arity(); ++i) {
      const auto in = static_cast<size_t>(g.inputs()[i]);
      same_operands &= eg.find(node.child(i)) == eg.find(run.roots.node_class[in]);
    }
    if (!same_operands) continue;
    const Attrs& a = run.teg.attrs(node.attr());
    if (a == s.attrs) return true;
    auto got = optimize::composite::expand(def, a, s.inputs);
    if (want && got && got->graph.hash() == want->graph.hash()) return true;
  }
  return false;
}

TEST(CompositeGeneric, EverySampleDecomposesAndIsRecognized) {
  size_t ops = 0, samples = 0, recognized = 0;
  std::string missed;
  for (const OpDef* def : all_op_defs()) {
    if (!def->decompose || !def->samples) continue;
    ++ops;
    for (const OpSample& s : def->samples()) {
      SCOPED_TRACE(def->name + "/" + s.label);
      SampleGraph sg = sample_graphs(*def, s);
      if (sg.primitive.node(sg.primitive.outputs()[0].second).op_name() == "input") continue;
      ++samples;
      // composite -> primitives: the class of y gets the decomposition's root op.
      {
        auto run = run_composite_rules(sg.composite, {.decompose = true, .recognize = false}, 3);
        const std::string root_op(sg.primitive.node(sg.primitive.outputs()[0].second).op_name());
        EXPECT_TRUE(run->find(sg.composite, "y", root_op)) << "no " << root_op;
        EXPECT_EQ(run->fired("decompose-" + def->name), 1u);
      }
      // primitives -> composite, with the sample's attributes.
      {
        auto run = run_composite_rules(sg.primitive, {.decompose = false, .recognize = true}, 4);
        if (recognized_as_sample(*run, sg.primitive, *def, s)) {
          ++recognized;
        } else {
          missed += " " + def->name + "/" + s.label;
        }
      }
    }
  }
  std::printf("composite ops %zu, samples %zu, recognized %zu; missed:%s\n", ops, samples,
              recognized, missed.c_str());
  EXPECT_TRUE(missed.empty()) << missed;
}

}  // namespace
}  // namespace mn::testing
