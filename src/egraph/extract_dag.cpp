// DAG-aware extraction by local search over the greedy tree-cost choice.
//
// State: a choice for every class that has one, and refs[c] = the number of edges into c from
// chosen nodes of selected classes (plus one per root). A class is selected while refs > 0, and
// the DAG cost is the sum of the selected classes' node costs. Switching class c from node a to
// node b adds b's child edges (classes reaching refs 1 enter, with their own choices, and pay)
// and removes a's (classes reaching 0 leave, with theirs, and refund); every change is logged so
// a switch that does not pay is undone exactly. A shared sub-term is thus counted once, which is
// the point: a node that tree cost rejects becomes cheap when its children are already paid for.
//
// Cycles: a switch may not make c reachable from its own new children. A topological position
// per class (children first) answers that in O(arity) while it is valid; a switch that breaks it
// falls back to a depth-first search for the rest of the pass, and positions are recomputed
// between passes.
#include <algorithm>
#include <cmath>
#include <limits>

#include <meganeura/error.h>

#include "egraph/extract.h"

namespace mn::egraph {

namespace {

class DagSearch {
 public:
  DagSearch(const EGraph& eg, std::vector<Id>& choice, const NodeCost& cost)
      : eg_(eg),
        choice_(choice),
        refs_(eg.num_ids(), 0),
        visit_(eg.num_ids(), 0),
        node_cost_(eg.num_ids(), 0.0) {
    for (Id c = 0; c < eg.num_ids(); ++c) {
      if (!eg.is_root(c)) continue;
      for (Id n : eg.class_nodes(c)) node_cost_[n] = cost(eg, eg.node(n));
    }
  }

  void pin(Id root) { total_ += inc(root); }
  double total() const { return total_; }

  size_t pass() {
    compute_positions();
    order_valid_ = true;
    size_t accepted = 0;
    // Children before parents, so a class is tried after the cheaper forms of what it uses.
    for (Id c : topo_) {
      if (refs_[c] == 0) continue;
      for (Id n : eg_.class_nodes(c)) {
        if (n == choice_[c]) continue;
        Check check = classify(c, n);
        if (check != Check::unusable && try_switch(c, n, check == Check::search)) ++accepted;
      }
    }
    return accepted;
  }

 private:
  enum class Check { unusable, acyclic, search };
  // Every child needs a choice; positions prove most candidates acyclic, the rest need a search
  // (run only for candidates that would pay, see try_switch).
  Check classify(Id c, Id n) const {
    Check check = Check::acyclic;
    for (Id ch : eg_.node(n).children()) {
      if (choice_[ch] == no_id || ch == c) return Check::unusable;
      if (!order_valid_ || pos_[ch] >= pos_[c]) check = Check::search;
    }
    return check;
  }

  bool closes_cycle(Id c, Id n) {
    for (Id ch : eg_.node(n).children())
      if (reaches(ch, c)) return true;
    return false;
  }

  bool reaches(Id from, Id target) {
    ++epoch_;
    stack_.clear();
    stack_.push_back(from);
    visit_[from] = epoch_;
    while (!stack_.empty()) {
      Id x = stack_.back();
      stack_.pop_back();
      if (x == target) return true;
      for (Id ch : eg_.node(choice_[x]).children()) {
        if (visit_[ch] != epoch_) {
          visit_[ch] = epoch_;
          stack_.push_back(ch);
        }
      }
    }
    return false;
  }

  // Adds one reference to `cls`; returns the cost of what entered the selection.
  double inc(Id cls) {
    double delta = 0;
    stack_.clear();
    stack_.push_back(cls);
    while (!stack_.empty()) {
      Id x = stack_.back();
      stack_.pop_back();
      log_.push_back({x, +1});
      if (refs_[x]++ != 0) continue;
      delta += node_cost_[choice_[x]];
      for (Id ch : eg_.node(choice_[x]).children()) stack_.push_back(ch);
    }
    return delta;
  }

  // Removes one reference from `cls`; returns minus the cost of what left the selection.
  double dec(Id cls) {
    double delta = 0;
    stack_.clear();
    stack_.push_back(cls);
    while (!stack_.empty()) {
      Id x = stack_.back();
      stack_.pop_back();
      log_.push_back({x, -1});
      if (--refs_[x] != 0) continue;
      delta -= node_cost_[choice_[x]];
      for (Id ch : eg_.node(choice_[x]).children()) stack_.push_back(ch);
    }
    return delta;
  }

  bool try_switch(Id c, Id n, bool needs_cycle_check) {
    Id old = choice_[c];
    log_.clear();
    double delta = node_cost_[n] - node_cost_[old];
    choice_[c] = n;
    // Add before removing so what both nodes share never leaves and re-enters.
    for (Id ch : eg_.node(n).children()) delta += inc(ch);
    for (Id ch : eg_.node(old).children()) delta += dec(ch);
    double eps = 1e-12 * std::max(1.0, std::abs(total_));
    // The reference counts stay exact even if n would close a cycle (c is already selected, so
    // the cascade stops there), so the cost is known before paying for the cycle search.
    if (delta < -eps && !(needs_cycle_check && closes_cycle(c, n))) {
      total_ += delta;
      for (Id ch : eg_.node(n).children())
        if (pos_[ch] >= pos_[c]) order_valid_ = false;
      return true;
    }
    for (size_t i = log_.size(); i-- > 0;) refs_[log_[i].cls] -= log_[i].step;
    choice_[c] = old;
    return false;
  }

  // Post-order over the choice graph of every class with a choice.
  void compute_positions() {
    size_t n = eg_.num_ids();
    pos_.assign(n, 0);
    topo_.clear();
    std::vector<uint8_t> state(n, 0);
    for (Id root = 0; root < n; ++root) {
      if (!eg_.is_root(root) || choice_[root] == no_id || state[root]) continue;
      detail::post_order(eg_, choice_, root, state, [&](Id cls) {
        pos_[cls] = static_cast<uint32_t>(topo_.size());
        topo_.push_back(cls);
      });
    }
  }

  struct Step {
    Id cls;
    int32_t step;
  };
  const EGraph& eg_;
  std::vector<Id>& choice_;
  std::vector<uint32_t> refs_;
  std::vector<uint32_t> visit_;
  std::vector<double> node_cost_;
  std::vector<uint32_t> pos_;
  std::vector<Id> topo_;
  std::vector<Id> stack_;
  std::vector<Step> log_;
  uint32_t epoch_ = 0;
  double total_ = 0;
  bool order_valid_ = true;
};

}  // namespace

Extraction extract_dag(const EGraph& eg, std::span<const Id> roots, const NodeCost& cost,
                       const DagOptions& options) {
  std::vector<Id> choice = detail::greedy_choices(eg, tree_cost(cost));
  Extraction out;
  // Validates the roots and the greedy choice before searching from it.
  detail::finish_extraction(eg, roots, choice, out);
  DagSearch search(eg, choice, cost);
  for (Id r : out.roots) search.pin(r);
  for (size_t p = 0; p < options.max_passes; ++p)
    if (search.pass() == 0) break;
  detail::finish_extraction(eg, roots, choice, out);
  out.cost = dag_cost(eg, out, cost);
  return out;
}

}  // namespace mn::egraph
