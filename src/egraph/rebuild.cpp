// egg's rebuild: merges only queue the parents of the class that stopped being a root; here
// each queued node is re-canonicalized in place and re-entered in the hash-cons, and a
// collision with an existing node is a congruence (merge the two classes, drop the duplicate).
// Analysis repair runs to a fixpoint in the same loop because modify() may merge again.
#include <algorithm>

#include "egraph/egraph.h"

namespace mn::egraph {

void EGraph::kill(Id node_id) {
  dead_[node_id] = 1;
  --num_live_;
  OpId op = nodes_[node_id].op();
  ops_with_dead_.push_back(op);
  // The dead node is still listed as a parent of its children and as a node of its class.
  dirty_.push_back(node_id);
  for (Id c : nodes_[node_id].children()) dirty_.push_back(c);
}

size_t EGraph::rebuild() {
  size_t unions = 0;
  while (!pending_.empty() || !analysis_pending_.empty()) {
    while (!pending_.empty()) {
      Id n = pending_.back();
      pending_.pop_back();
      if (dead_[n]) continue;
      ENode& node = nodes_[n];
      bool canonical = true;
      for (Id c : node.children()) canonical = canonical && uf_.is_root(c);
      // Its hash-cons entry already reflects its current, canonical form.
      if (canonical) continue;
      memo_.erase(n, hashes_[n]);
      canonicalize(node);
      uint32_t hash = static_cast<uint32_t>(node.hash());
      hashes_[n] = hash;
      Id twin = memo_.find(node, hash, nodes_);
      if (twin == no_id) {
        memo_.insert(n, hash);
      } else {
        kill(n);
        if (merge(twin, n)) ++unions;
      }
    }
    while (!analysis_pending_.empty() && pending_.empty()) {
      Id n = analysis_pending_.back();
      analysis_pending_.pop_back();
      if (dead_[n]) continue;
      Id cls = uf_.find(n);
      if (analysis_->on_update(*this, cls, nodes_[n])) {
        const auto& parents = classes_[cls].parents;
        analysis_pending_.insert(analysis_pending_.end(), parents.begin(), parents.end());
        analysis_->modify(*this, cls);
      }
    }
  }
  repair_classes();
  return unions;
}

void EGraph::repair_classes() {
  if (stamp_.size() < nodes_.size()) stamp_.resize(nodes_.size(), 0);
  ++epoch_;
  auto by_head = [this](Id x, Id y) {
    const ENode& a = nodes_[x];
    const ENode& b = nodes_[y];
    if (a.op() != b.op()) return a.op() < b.op();
    if (a.attr() != b.attr()) return a.attr() < b.attr();
    return x < y;
  };
  auto is_dead = [this](Id n) { return dead_[n] != 0; };
  for (Id d : dirty_) {
    Id c = uf_.find(d);
    if (stamp_[c] == epoch_) continue;
    stamp_[c] = epoch_;
    ClassEntry& cls = classes_[c];
    auto live = [this](Id n) { return dead_[n] == 0; };
    cls.nodes.retain(live);
    std::sort(cls.nodes.begin(), cls.nodes.end(), by_head);
    cls.parents.retain(live);
    std::sort(cls.parents.begin(), cls.parents.end());
    cls.parents.resize_down(static_cast<uint32_t>(
        std::unique(cls.parents.begin(), cls.parents.end()) - cls.parents.begin()));
  }
  dirty_.clear();
  std::sort(ops_with_dead_.begin(), ops_with_dead_.end());
  ops_with_dead_.erase(std::unique(ops_with_dead_.begin(), ops_with_dead_.end()),
                       ops_with_dead_.end());
  for (OpId op : ops_with_dead_) std::erase_if(by_op_[op], is_dead);
  ops_with_dead_.clear();
}

}  // namespace mn::egraph
