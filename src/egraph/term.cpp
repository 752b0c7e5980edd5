#include "egraph/term.h"

#include <meganeura/error.h>

namespace mn::egraph {

Term Term::from(const EGraph& eg, const Extraction& ex) {
  Term t;
  std::vector<uint32_t> index(eg.num_ids(), UINT32_MAX);
  std::vector<Id> children;
  for (Id cls : ex.order) {
    const ENode& node = eg.node(ex.choice[cls]);
    children.clear();
    for (Id ch : node.children()) children.push_back(index[eg.find(ch)]);
    index[cls] = static_cast<uint32_t>(t.nodes.size());
    t.nodes.emplace_back(node.op(), node.attr(), children);
    t.classes.push_back(cls);
  }
  for (Id r : ex.roots) t.roots.push_back(index[r]);
  return t;
}

std::string Term::to_string(uint32_t i, const std::function<std::string(OpId, Attr)>& head) const {
  if (i >= nodes.size()) throw Error("term: node index " + std::to_string(i) + " out of range");
  const ENode& n = nodes[i];
  std::string h = head(n.op(), n.attr());
  if (n.arity() == 0) return h;
  std::string s = "(" + h;
  for (Id c : n.children()) s += " " + to_string(c, head);
  return s + ")";
}

}  // namespace mn::egraph
