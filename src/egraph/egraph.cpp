#include "egraph/egraph.h"

#include <algorithm>
#include <utility>

namespace mn::egraph {

void EGraph::canonicalize(ENode& node) const {
  for (Id& c : node.children()) c = uf_.find(c);
}

void EGraph::reserve(size_t n) {
  nodes_.reserve(n);
  hashes_.reserve(n);
  dead_.reserve(n);
  classes_.reserve(n);
  memo_.reserve(n);
}

Id EGraph::lookup(OpId op, Attr attr, std::span<const Id> children) const {
  ENode key(op, attr, children);
  canonicalize(key);
  Id id = memo_.find(key, static_cast<uint32_t>(key.hash()), nodes_);
  return id == no_id ? no_id : uf_.find(id);
}

Id EGraph::add(OpId op, Attr attr, std::span<const Id> children) {
  ENode key(op, attr, children);
  canonicalize(key);
  uint32_t hash = static_cast<uint32_t>(key.hash());
  Id existing = memo_.find(key, hash, nodes_);
  if (existing != no_id) return uf_.find(existing);

  Id id = uf_.make_set();
  nodes_.push_back(std::move(key));
  hashes_.push_back(hash);
  dead_.push_back(0);
  classes_.emplace_back();
  classes_[id].nodes.push_back(id);
  // A parent is listed once per class even when the class is several of its children. Ids
  // only grow, so appending keeps the parent lists sorted.
  std::span<const Id> kids = nodes_[id].children();
  for (size_t i = 0; i < kids.size(); ++i)
    if (std::find(kids.begin(), kids.begin() + i, kids[i]) == kids.begin() + i)
      classes_[kids[i]].parents.push_back(id);
  memo_.insert(id, hash);
  if (op >= by_op_.size()) by_op_.resize(op + 1);
  by_op_[op].push_back(id);
  ++num_live_;
  ++num_classes_;
  ++version_;
  if (analysis_) {
    analysis_->on_add(*this, id, nodes_[id]);
    analysis_->modify(*this, id);
  }
  return id;
}

bool EGraph::merge(Id a, Id b) {
  a = uf_.find(a);
  b = uf_.find(b);
  if (a == b) return false;
  // Keep the bigger class as root: only the other's parents need re-canonicalizing and only
  // its lists are copied.
  const ClassEntry& ca = classes_[a];
  const ClassEntry& cb = classes_[b];
  if (ca.nodes.size() + ca.parents.size() < cb.nodes.size() + cb.parents.size()) std::swap(a, b);
  uf_.link(a, b);
  --num_classes_;
  ++version_;

  ClassEntry& into = classes_[a];
  ClassEntry& from = classes_[b];
  pending_.insert(pending_.end(), from.parents.begin(), from.parents.end());
  if (analysis_) {
    DidMerge changed = analysis_->on_merge(a, b);
    if (changed.a)
      analysis_pending_.insert(analysis_pending_.end(), into.parents.begin(), into.parents.end());
    if (changed.b)
      analysis_pending_.insert(analysis_pending_.end(), from.parents.begin(), from.parents.end());
  }
  into.nodes.append(from.nodes.begin(), from.nodes.end());
  into.parents.append(from.parents.begin(), from.parents.end());
  from.nodes.reset();
  from.parents.reset();
  dirty_.push_back(a);
  if (analysis_) analysis_->modify(*this, a);
  return true;
}

std::vector<Id> EGraph::classes() const {
  std::vector<Id> out;
  out.reserve(num_classes_);
  for (Id id = 0; id < nodes_.size(); ++id)
    if (uf_.is_root(id)) out.push_back(id);
  return out;
}

}  // namespace mn::egraph
