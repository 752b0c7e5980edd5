#include "optimize/optimize.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "egraph/extract.h"
#include "egraph/runner.h"
#include "egraph/scheduler.h"
#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "optimize/cost_model.h"
#include "optimize/rules_algebra.h"
#include "optimize/rules_composite.h"
#include "optimize/tensor_egraph.h"

namespace mn::optimize {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void run_optimizer(const Graph& g, const OptimizeOptions& options, const CostModel& model,
                   OptimizeResult& result) {
  OptimizeReport& report = result.report;
  TensorEGraph teg;
  const GraphRoots roots = teg.add_graph(g);
  teg.egraph().rebuild();

  std::vector<egraph::Rewrite> rules = algebra_rules(teg);
  for (egraph::Rewrite& r : composite_rules(teg)) rules.push_back(std::move(r));

  egraph::Runner runner(teg.egraph());
  runner.limits({.iterations = options.max_iterations,
                 .nodes = options.max_enodes,
                 .seconds = options.max_seconds});
  // egg's match limit (1000) is meant for small e-graphs; a rule that legitimately applies once
  // per node of a large graph (constants moved right, gradient identities) must not be banned.
  const size_t match_limit = std::max<size_t>(1000, 2 * teg.egraph().num_nodes());
  runner.scheduler(std::make_unique<egraph::BackoffScheduler>(match_limit, 2));
  const egraph::RunReport run = runner.run(rules);

  report.eclasses = teg.egraph().num_classes();
  report.enodes = teg.egraph().num_nodes();
  report.iterations = run.iterations;
  report.stop_reason = egraph::stop_reason_name(run.stop_reason);
  for (const egraph::RuleStats& r : run.rules) {
    if (r.applied > 0) report.rules.push_back({r.name, r.applied});
  }
  std::sort(report.rules.begin(), report.rules.end(),
            [](const RuleFired& a, const RuleFired& b) { return a.count > b.count; });

  const std::vector<Id> root_ids = roots.all();
  const egraph::Extraction extraction =
      egraph::extract_dag(teg.egraph(), root_ids, model.node_cost(teg));
  result.graph = teg.to_graph(g, roots, extraction);
}

}  // namespace

OptimizeResult optimize(const Graph& g, const OptimizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const CostModel model(options.cost);
  const GraphEstimate before = model.estimate(g);
  OptimizeResult result;
  OptimizeReport& report = result.report;
  report.nodes_before = before.nodes;
  report.bytes_before = before.bytes;
  report.flops_before = before.flops;

  auto unchanged = [&](std::string reason) {
    result.graph = copy_graph(g);
    report.stop_reason = std::move(reason);
    report.nodes_after = before.nodes;
    report.bytes_after = before.bytes;
    report.flops_after = before.flops;
    report.seconds = seconds_since(start);
    return std::move(result);
  };
  if (!options.enabled) return unchanged("disabled");

  // A failure inside the optimizer (a rule that broke the type invariant, an extraction that
  // does not re-infer) must not stop a model from compiling: the graph goes on unoptimized and
  // the report says why. Tests require "saturated", so such a failure does not go unnoticed.
  try {
    run_optimizer(g, options, model, result);
  } catch (const Error& e) {
    report.rules.clear();
    return unchanged(std::string("failed: ") + e.what());
  }
  const GraphEstimate after = model.estimate(result.graph);
  report.nodes_after = after.nodes;
  report.bytes_after = after.bytes;
  report.flops_after = after.flops;
  report.seconds = seconds_since(start);
  return result;
}

}  // namespace mn::optimize
