// The checks behind EGraph::check_invariants (see egraph.h for the list). Tests call it after
// every rebuild, so a broken worklist shows up where it happens rather than as a wrong rewrite.
#include <algorithm>
#include <string>

#include <meganeura/error.h>

#include "egraph/egraph.h"

namespace mn::egraph {
namespace {

[[noreturn]] void broken(const std::string& what) {
  throw Error("e-graph invariant broken: " + what);
}

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

void EGraph::check_invariants() const {
  if (!is_clean()) broken("check_invariants needs a rebuilt e-graph (pending work left)");
  size_t live = 0;
  for (Id n = 0; n < nodes_.size(); ++n) {
    if (dead_[n]) continue;
    ++live;
    const ENode& node = nodes_[n];
    for (Id c : node.children())
      if (!uf_.is_root(c)) broken("node " + str(n) + " has non-canonical child " + str(c));
    if (hashes_[n] != static_cast<uint32_t>(node.hash()))
      broken("node " + str(n) + " is stored under a stale hash");
    Id found = memo_.find(node, hashes_[n], nodes_);
    if (found != n)
      broken("hash-cons maps node " + str(n) + " to " + (found == no_id ? "nothing" : str(found)));
    for (Id c : node.children()) {
      const auto& parents = classes_[c].parents;
      if (!std::binary_search(parents.begin(), parents.end(), n))
        broken("node " + str(n) + " missing from the parents of class " + str(c));
    }
  }
  if (live != num_live_) broken("live node count " + str(num_live_) + " != " + str(live));
  if (memo_.size() != live)
    broken("hash-cons holds " + str(memo_.size()) + " entries for " + str(live) + " live nodes");

  size_t roots = 0;
  size_t listed = 0;
  for (Id c = 0; c < classes_.size(); ++c) {
    const ClassEntry& cls = classes_[c];
    if (!uf_.is_root(c)) {
      if (!cls.nodes.empty() || !cls.parents.empty())
        broken("non-canonical class " + str(c) + " still has nodes or parents");
      continue;
    }
    ++roots;
    if (cls.nodes.empty()) broken("class " + str(c) + " is empty");
    listed += cls.nodes.size();
    for (size_t i = 0; i < cls.nodes.size(); ++i) {
      Id n = cls.nodes[i];
      if (dead_[n]) broken("class " + str(c) + " lists dead node " + str(n));
      if (uf_.find(n) != c)
        broken("class " + str(c) + " lists node " + str(n) + " of another class");
      if (i > 0) {
        const ENode& a = nodes_[cls.nodes[i - 1]];
        const ENode& b = nodes_[n];
        if (a.op() > b.op() || (a.op() == b.op() && a.attr() > b.attr()))
          broken("class " + str(c) + " nodes are not sorted by operator");
      }
    }
    for (size_t i = 0; i < cls.parents.size(); ++i) {
      Id p = cls.parents[i];
      if (dead_[p]) broken("class " + str(c) + " lists dead parent " + str(p));
      if (i > 0 && cls.parents[i - 1] >= p)
        broken("class " + str(c) + " parents are not sorted and unique");
      auto ch = nodes_[p].children();
      if (std::find(ch.begin(), ch.end(), c) == ch.end())
        broken("class " + str(c) + " lists " + str(p) + " as a parent but is not its child");
    }
  }
  if (roots != num_classes_) broken("class count " + str(num_classes_) + " != " + str(roots));
  if (listed != live) broken("classes list " + str(listed) + " nodes, " + str(live) + " are live");

  size_t indexed = 0;
  for (OpId op = 0; op < by_op_.size(); ++op) {
    for (Id n : by_op_[op]) {
      if (dead_[n]) broken("operator index lists dead node " + str(n));
      if (nodes_[n].op() != op)
        broken("operator index lists node " + str(n) + " under op " + str(op));
    }
    indexed += by_op_[op].size();
  }
  if (indexed != live)
    broken("operator index holds " + str(indexed) + " of " + str(live) + " nodes");
}

}  // namespace mn::egraph
