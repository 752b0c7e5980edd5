#pragma once
// The optimizer stage: a graph goes into an e-graph, equality saturation rewrites it with the
// op table's decompositions (both directions) and a small algebra, and the cheapest equivalent
// graph under the cost model comes back out. The extracted graph is what schedule, plan and
// codegen compile.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <meganeura/graph.h>

namespace mn::optimize {

// Device parameters of the cost model. The defaults are an H200-class GPU as this project's
// kernels measure on one (cost_model.cpp says more); a session fills them from its device.
struct CostParams {
  double bytes_per_second = 3.5e12;  // streaming pointwise kernels
  double flops_per_second = 3.0e13;  // f32 GEMM
  double seconds_per_dispatch = 4.0e-6;
};

struct OptimizeOptions {
  bool enabled = true;  // false: the graph comes back unchanged (the report says so)
  size_t max_iterations = 30;
  size_t max_enodes = 2'000'000;
  double max_seconds = 5.0;
  CostParams cost;
};

struct RuleFired {
  std::string name;
  size_t count = 0;
};

struct OptimizeReport {
  size_t eclasses = 0;
  size_t enodes = 0;
  size_t iterations = 0;
  // "saturated", "iteration limit", "node limit", "time limit", "disabled", or "failed: <why>"
  // (the optimizer hit an internal error; the graph is returned unoptimized).
  std::string stop_reason;
  std::vector<RuleFired> rules;  // rules that fired, with how often
  double seconds = 0;
  size_t nodes_before = 0, nodes_after = 0;  // compute nodes (sources excluded)
  double bytes_before = 0, bytes_after = 0;  // estimated bytes read + written, cost model
  double flops_before = 0, flops_after = 0;
  // Kernel launches of the compiled step. The planner (plan/step_plan), which knows fusion,
  // fills `after` (what runs); `before` (one kernel per op of the graph as written) needs a
  // second, unoptimized plan, which `mn inspect` makes.
  size_t dispatches_before = 0, dispatches_after = 0;
};

struct OptimizeResult {
  Graph graph;  // same input, parameter, state and output names; same assignments
  OptimizeReport report;
};

OptimizeResult optimize(const Graph& g, const OptimizeOptions& options = {});

}  // namespace mn::optimize
