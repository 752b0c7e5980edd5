#pragma once
// Disjoint sets over e-class ids. Roots are chosen by the caller (EGraph keeps the class with
// more nodes and parents as the root so that fewer parents need re-canonicalizing).
#include <vector>

#include "egraph/id.h"

namespace mn::egraph {

class UnionFind {
 public:
  Id make_set() {
    Id id = static_cast<Id>(parents_.size());
    parents_.push_back(id);
    return id;
  }
  size_t size() const { return parents_.size(); }

  // Path halving: lookups flatten the chains they walk. That changes no set, only the path to
  // its root, so it is allowed through a const interface.
  Id find(Id x) const {
    while (parents_[x] != x) {
      parents_[x] = parents_[parents_[x]];
      x = parents_[x];
    }
    return x;
  }
  bool is_root(Id x) const { return parents_[x] == x; }

  // Makes `child` (a root) point at `root` (a root).
  void link(Id root, Id child) { parents_[child] = root; }

 private:
  mutable std::vector<Id> parents_;
};

}  // namespace mn::egraph
