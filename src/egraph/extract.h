#pragma once
// Extraction: choose one e-node per e-class reachable from the roots.
//
// extract_greedy is egg's bottom-up extractor: a class costs the cheapest of its nodes given
// its children's costs (a tree cost, so a shared sub-term is paid once per use). It runs as a
// worklist from the leaves up the parent lists, so each node is re-evaluated only when a
// child got cheaper.
//
// extract_dag minimizes the cost of the chosen DAG instead (each chosen class paid once): it
// starts from the greedy choice and improves it by local search, switching one class to another
// of its nodes whenever that lowers the DAG cost, with reference counts telling exactly which
// classes enter and leave the selection. Costs must be positive for both (zero-cost cycles
// cannot be chosen apart); an infinite cost forbids a node.
#include <functional>
#include <span>
#include <vector>

#include "egraph/egraph.h"

namespace mn::egraph {

// Cost of a node given the costs of its children's classes (tree cost).
using TreeCost = std::function<double(const EGraph& egraph, const ENode& node,
                                      std::span<const double> child_costs)>;
// Cost of a node alone (DAG cost: the sum over chosen classes).
using NodeCost = std::function<double(const EGraph& egraph, const ENode& node)>;

// The tree cost that adds a node's own cost to its children's.
TreeCost tree_cost(NodeCost node_cost);

struct Extraction {
  std::vector<Id> roots;   // canonical ids of the requested roots, in order
  std::vector<Id> choice;  // per class id: the chosen node for reachable classes, else no_id
  std::vector<Id> order;   // reachable classes, every class after the classes its choice uses
  double cost = 0;         // greedy: sum of the roots' tree costs; dag: the DAG cost

  // The chosen node of the class holding `id`.
  Id chosen(const EGraph& egraph, Id id) const { return choice[egraph.find(id)]; }
};

struct DagOptions {
  // Local-search passes over the reachable classes; each pass that improves nothing ends it.
  size_t max_passes = 8;
};

// The e-graph must be rebuilt. A root class without any finite-cost acyclic term is an
// mn::Error.
Extraction extract_greedy(const EGraph& egraph, std::span<const Id> roots, const TreeCost& cost);
Extraction extract_dag(const EGraph& egraph, std::span<const Id> roots, const NodeCost& cost,
                       const DagOptions& options = {});

// The DAG cost of an extraction's choices: each reachable class counted once.
double dag_cost(const EGraph& egraph, const Extraction& extraction, const NodeCost& cost);

namespace detail {
// Greedy tree-cost choices for every class (no_id where none is finite).
std::vector<Id> greedy_choices(const EGraph& egraph, const TreeCost& cost,
                               std::vector<double>* best = nullptr);
// Visits, children first, every class reachable from `start` through `choices` (one chosen
// e-node per class) that `state` does not mark done; `state` (0 unvisited, 1 on the walk,
// 2 done; one entry per id) carries over between calls. Throws mn::Error for a cycle.
void post_order(const EGraph& egraph, const std::vector<Id>& choices, Id start,
                std::vector<uint8_t>& state, const std::function<void(Id)>& visit);
// Fills roots, choice (reachable only) and order from per-class choices; throws mn::Error for
// a root without a choice or a cycle among the choices.
void finish_extraction(const EGraph& egraph, std::span<const Id> roots,
                       const std::vector<Id>& all_choices, Extraction& out);
}  // namespace detail

}  // namespace mn::egraph
