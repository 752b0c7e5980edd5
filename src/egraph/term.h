#pragma once
// An extracted term as a flat DAG (egg's RecExpr): nodes in dependency order, children are
// indices of earlier nodes, one entry per chosen class so sharing is kept. This is what a client
// turns back into its own graph.
#include <functional>
#include <string>
#include <vector>

#include "egraph/extract.h"

namespace mn::egraph {

struct Term {
  std::vector<ENode> nodes;     // children are indices into `nodes`
  std::vector<Id> classes;      // the e-class each node was chosen for
  std::vector<uint32_t> roots;  // one index per extraction root

  static Term from(const EGraph& egraph, const Extraction& extraction);
  // Text of the tree under `index` (shared sub-terms printed at every use).
  std::string to_string(uint32_t index, const std::function<std::string(OpId, Attr)>& head) const;
};

}  // namespace mn::egraph
