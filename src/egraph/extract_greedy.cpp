#include <deque>
#include <limits>
#include <string>

#include <meganeura/error.h>

#include "egraph/extract.h"

namespace mn::egraph {

namespace {
// Tree costs of shared DAGs grow exponentially with depth; clamping keeps them finite and
// comparable instead of letting whole classes become "infinitely" costly and unextractable.
// An infinite cost from the cost function itself means "never choose this node".
constexpr double max_cost = 1e300;
constexpr double inf = std::numeric_limits<double>::infinity();
}  // namespace

TreeCost tree_cost(NodeCost node_cost) {
  return [node_cost = std::move(node_cost)](const EGraph& eg, const ENode& node,
                                            std::span<const double> child_costs) {
    double c = node_cost(eg, node);
    for (double x : child_costs) c += x;
    return c;
  };
}

namespace detail {

std::vector<Id> greedy_choices(const EGraph& eg, const TreeCost& cost, std::vector<double>* out) {
  if (!eg.is_clean()) throw Error("extraction needs a rebuilt e-graph (call rebuild())");
  size_t n = eg.num_ids();
  std::vector<double> best(n, inf);
  std::vector<Id> choice(n, no_id);
  std::vector<uint8_t> queued(n, 0);
  std::deque<Id> work;
  for (Id c = 0; c < n; ++c) {
    if (!eg.is_root(c)) continue;
    for (Id node : eg.class_nodes(c)) {
      if (eg.node(node).arity() == 0) {
        work.push_back(node);
        queued[node] = 1;
      }
    }
  }
  std::vector<double> child_costs;
  while (!work.empty()) {
    Id id = work.front();
    work.pop_front();
    queued[id] = 0;
    const ENode& node = eg.node(id);
    child_costs.clear();
    bool ready = true;
    for (Id ch : node.children()) {
      double c = best[ch];
      if (c == inf) {
        ready = false;
        break;
      }
      child_costs.push_back(c);
    }
    if (!ready) continue;
    double c = cost(eg, node, child_costs);
    // Clamped children sum far below overflow, so infinity (or NaN) here is the cost function
    // forbidding the node.
    if (!(c < inf)) continue;
    c = std::min(c, max_cost);
    Id cls = eg.find(id);
    if (!(c < best[cls])) continue;
    best[cls] = c;
    choice[cls] = id;
    for (Id p : eg.class_parents(cls)) {
      if (!queued[p]) {
        queued[p] = 1;
        work.push_back(p);
      }
    }
  }
  if (out) *out = std::move(best);
  return choice;
}

void post_order(const EGraph& eg, const std::vector<Id>& choices, Id start,
                std::vector<uint8_t>& state, const std::function<void(Id)>& visit) {
  if (state[start] == 2) return;
  std::vector<std::pair<Id, uint32_t>> stack{{start, 0}};
  state[start] = 1;
  while (!stack.empty()) {
    auto& [cls, next] = stack.back();
    const ENode& node = eg.node(choices[cls]);
    if (next < node.arity()) {
      Id ch = node.child(next++);
      if (state[ch] == 1)
        throw Error("extraction: the chosen e-nodes form a cycle through e-class " +
                    std::to_string(ch) + " (node costs must be positive)");
      if (state[ch] == 0) {
        state[ch] = 1;
        stack.emplace_back(ch, 0);
      }
      continue;
    }
    const Id done = cls;
    state[done] = 2;
    stack.pop_back();
    visit(done);
  }
}

void finish_extraction(const EGraph& eg, std::span<const Id> roots,
                       const std::vector<Id>& all_choices, Extraction& out) {
  size_t n = eg.num_ids();
  out.roots.clear();
  out.order.clear();
  out.choice.assign(n, no_id);
  std::vector<uint8_t> state(n, 0);
  for (Id root : roots) {
    if (root >= n) throw Error("extraction: root id " + std::to_string(root) + " out of range");
    Id r = eg.find(root);
    out.roots.push_back(r);
    if (all_choices[r] == no_id)
      throw Error("extraction: e-class " + std::to_string(r) + " has no finite-cost acyclic term");
    post_order(eg, all_choices, r, state, [&](Id cls) {
      out.choice[cls] = all_choices[cls];
      out.order.push_back(cls);
    });
  }
}

}  // namespace detail

Extraction extract_greedy(const EGraph& eg, std::span<const Id> roots, const TreeCost& cost) {
  std::vector<double> best;
  std::vector<Id> choice = detail::greedy_choices(eg, cost, &best);
  Extraction out;
  detail::finish_extraction(eg, roots, choice, out);
  for (Id r : out.roots) out.cost += best[r];
  return out;
}

double dag_cost(const EGraph& eg, const Extraction& ex, const NodeCost& cost) {
  double total = 0;
  for (Id cls : ex.order) total += cost(eg, eg.node(ex.choice[cls]));
  return total;
}

}  // namespace mn::egraph
