#pragma once
// Helpers of the composite-rule tests: run only the composite rules on a graph, look for an op in
// an output's class, and extract the graph that prefers composites (or primitives).
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "egraph/extract.h"
#include "egraph/runner.h"
#include "ir/op_def.h"
#include "optimize/rules_composite.h"
#include "optimize/tensor_egraph.h"
#include "optimize_test_util.h"

namespace mn::testing {

struct CompositeRun {
  optimize::TensorEGraph teg;
  optimize::GraphRoots roots;
  std::vector<egraph::Rewrite> rules;
  egraph::RunReport report;

  // The attributes of an `op` node in the class of output `name`, if there is one.
  std::optional<Attrs> find(const Graph& g, const std::string& output, std::string_view op) const {
    egraph::Id cls = egraph::no_id;
    for (const auto& [n, c] : roots.outputs)
      if (n == output) cls = c;
    if (cls == egraph::no_id) return std::nullopt;
    const egraph::EGraph& eg = teg.egraph();
    for (egraph::Id node : eg.class_nodes(eg.find(cls))) {
      if (teg.op_def(eg.node(node).op()).name == op) return teg.attrs(eg.node(node).attr());
    }
    return std::nullopt;
  }
  size_t fired(std::string_view rule) const {
    for (const auto& r : report.rules)
      if (r.name == rule) return r.applied;
    return 0;
  }

  // The graph with composite ops where the e-graph has them (prefer_composites), or with
  // primitives only where it can.
  Graph extract(const Graph& original, bool prefer_composites) const {
    auto cost = [&](const egraph::EGraph&, const egraph::ENode& n) {
      const OpDef& d = teg.op_def(n.op());
      if (teg.is_source(n.op())) return 0.0;
      if (d.decompose) return prefer_composites ? 1.0 : 1000.0;
      return 10.0;
    };
    std::vector<egraph::Id> r = roots.all();
    auto ex = egraph::extract_dag(teg.egraph(), r, cost);
    return teg.to_graph(original, roots, ex);
  }
};

inline std::unique_ptr<CompositeRun> run_composite_rules(
    const Graph& g, const optimize::CompositeRuleOptions& options = {}, size_t iterations = 8) {
  auto r = std::make_unique<CompositeRun>();
  r->roots = r->teg.add_graph(g);
  r->teg.egraph().rebuild();
  r->rules = optimize::composite_rules(r->teg, options);
  egraph::Runner runner(r->teg.egraph());
  runner.limits({.iterations = iterations, .nodes = 1'000'000, .seconds = 30.0});
  runner.scheduler(std::make_unique<egraph::SimpleScheduler>());
  r->report = runner.run(r->rules);
  r->teg.egraph().check_invariants();
  return r;
}

// Counts the nodes of op `name` in a graph.
inline size_t count_op(const Graph& g, std::string_view name) {
  size_t n = 0;
  for (const Node& node : g.nodes())
    if (node.op_name() == name) ++n;
  return n;
}

// Largest relative difference of the two graphs' outputs on random inputs.
inline double eval_difference(const Graph& a, const Graph& b, uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  return step_difference(a, b, random_feeds(a, rng));
}

}  // namespace mn::testing
