#pragma once
// The e-graph: e-nodes hash-consed into e-classes, a union-find over class ids, and egg's
// deferred rebuild (merge only records work; rebuild() restores the hash-cons and congruence
// invariants with a worklist over parents and repairs analysis data).
//
// Ids: every e-node ever added created a class and is named by that class's id. A node whose
// canonical form turned out equal to another node's during rebuild is "dead" (its class lives
// on, merged with the other). After rebuild():
//   - every live node's children are canonical (roots), and no two live nodes are equal;
//   - the hash-cons maps exactly the live nodes, each to itself;
//   - class_nodes(c) lists c's live nodes sorted by (op, attr); class_parents(c) lists, once
//     each, the live nodes having c as a child; nodes_with_op(op) lists the live nodes of op.
// check_invariants() verifies all of that (for tests).
#include <cstdint>
#include <span>
#include <vector>

#include "egraph/analysis.h"
#include "egraph/enode.h"
#include "egraph/hashcons.h"
#include "egraph/small_vector.h"
#include "egraph/union_find.h"

namespace mn::egraph {

class EGraph {
 public:
  // `analysis` (optional) must outlive the e-graph and is fixed for its lifetime.
  explicit EGraph(Analysis* analysis = nullptr) : analysis_(analysis) {}
  EGraph(const EGraph&) = delete;
  EGraph& operator=(const EGraph&) = delete;

  // Adds a node (its children canonicalized) unless an equal node exists; returns its class.
  Id add(OpId op, Attr attr, std::span<const Id> children);
  Id add(OpId op, Attr attr, std::initializer_list<Id> children) {
    return add(op, attr, std::span<const Id>(children.begin(), children.size()));
  }
  Id add(const ENode& node) { return add(node.op(), node.attr(), node.children()); }
  // The class of a node equal to `node` (children canonicalized), or no_id. Exact on a rebuilt
  // e-graph; between merges and rebuild() an equal node with stale children can be missed.
  Id lookup(OpId op, Attr attr, std::span<const Id> children) const;
  Id lookup(const ENode& node) const { return lookup(node.op(), node.attr(), node.children()); }

  // Records that two classes are equal; returns false when they already were. Congruence is
  // restored by rebuild().
  bool merge(Id a, Id b);
  // Restores the invariants; returns the number of merges congruence caused.
  size_t rebuild();
  bool is_clean() const { return pending_.empty() && analysis_pending_.empty() && dirty_.empty(); }

  Id find(Id id) const { return uf_.find(id); }
  bool is_root(Id id) const { return uf_.is_root(id); }

  const ENode& node(Id node_id) const { return nodes_[node_id]; }
  bool is_live(Id node_id) const { return !dead_[node_id]; }
  // The class holding node `node_id`.
  Id class_of(Id node_id) const { return uf_.find(node_id); }
  std::span<const Id> class_nodes(Id cls) const { return classes_[cls].nodes; }
  std::span<const Id> class_parents(Id cls) const { return classes_[cls].parents; }
  std::span<const Id> nodes_with_op(OpId op) const {
    if (op >= by_op_.size()) return {};
    return by_op_[op];
  }

  // Live e-nodes (egg's total_size).
  size_t num_nodes() const { return num_live_; }
  size_t num_classes() const { return num_classes_; }
  // Every id ever created (an upper bound for per-class tables).
  size_t num_ids() const { return nodes_.size(); }
  // The canonical class ids.
  std::vector<Id> classes() const;
  // Increases whenever a node is added or two classes merge; unchanged means no progress.
  uint64_t version() const { return version_; }

  Analysis* analysis() const { return analysis_; }
  void reserve(size_t nodes);

  // Throws mn::Error naming the first broken invariant. The e-graph must be clean.
  void check_invariants() const;

 private:
  struct ClassEntry {
    SmallVector<Id, 2> nodes;
    SmallVector<Id, 4> parents;
  };
  void canonicalize(ENode& node) const;
  void kill(Id node_id);
  void repair_classes();

  Analysis* analysis_ = nullptr;
  std::vector<ENode> nodes_;
  std::vector<uint32_t> hashes_;  // hash of each node's current form (as stored in memo_)
  std::vector<uint8_t> dead_;
  UnionFind uf_;
  std::vector<ClassEntry> classes_;
  HashCons memo_;
  std::vector<std::vector<Id>> by_op_;
  std::vector<OpId> ops_with_dead_;

  std::vector<Id> pending_;           // nodes whose children may be non-canonical
  std::vector<Id> analysis_pending_;  // nodes whose children's data changed
  std::vector<Id> dirty_;             // classes whose node/parent lists need repair
  std::vector<uint32_t> stamp_;       // per class, for visiting each once per repair
  uint32_t epoch_ = 0;

  size_t num_live_ = 0;
  size_t num_classes_ = 0;
  uint64_t version_ = 0;
};

template <class D>
const D& TypedAnalysis<D>::data(Id id) const {
  check_id(id);
  return data_[egraph_->find(id)];
}
template <class D>
D& TypedAnalysis<D>::mutable_data(Id id) {
  check_id(id);
  return data_[egraph_->find(id)];
}

}  // namespace mn::egraph
